"""One Spark session for the whole test run (local[2], UI off, few shuffle partitions)."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# a rule that fails on a tree it did not expect fails the test (production notes it and
# leaves the statement unchanged)
os.environ.setdefault("SQLEXT_STRICT", "1")


@pytest.fixture(scope="session")
def spark():
    from sqlext.session import local_session

    session = local_session("sqlext-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def view(spark):
    """Register rows as a temp view: view(name, rows, schema_ddl) -> name."""
    from pyspark.sql.types import _parse_datatype_string

    names = []

    def make(name, rows, schema):
        frame = spark.createDataFrame(rows, schema=_parse_datatype_string(schema))
        frame.createOrReplaceTempView(name)
        names.append(name)
        return name

    yield make
    for name in names:
        spark.catalog.dropTempView(name)


@pytest.fixture
def path(spark):
    """Force the recursion's evaluation path ('auto', 'walk' or 'levels') for one test."""
    def use(name):
        spark.conf.set("spark.sqlext.recursion.path", name)
    yield use
    spark.conf.unset("spark.sqlext.recursion.path")
