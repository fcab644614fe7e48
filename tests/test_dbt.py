"""dbt-spark in `session` mode runs in the same Python process as sqlext: its cursor takes
the process's session (SparkSession.builder.getOrCreate()) and hands each compiled model to
plain spark.sql. What sqlext gives such a project, tested without dbt itself (dbt-spark's
session extra needs pyspark < 4, see the README):

- functions registered by sqlext.install are there for dbt's SQL (CHANGELOG_FILTER);
- the same model files, built by `sqlext build`, are rewritten (FK_JOIN, self-joins)."""

from pathlib import Path

from pyspark.sql import SparkSession

import sqlext
from rows import multiset, ordered
from sqlext.models import build, discover

PROJECT = Path(__file__).resolve().parent / "dbt_project"


def test_dbt_session_mode_gets_the_installed_session_and_its_functions(spark, tmp_path):
    # what dbt-spark's session cursor does for every model
    dbt_session = SparkSession.builder.getOrCreate()
    assert dbt_session is sqlext.install(spark)
    models = discover(PROJECT)
    # dbt's compiled SQL for the two models, run as dbt runs it: plain spark.sql, no rewriting
    dbt_session.sql(models["accounts_changes"].sql).createOrReplaceTempView("accounts_changes")
    via_dbt = multiset(dbt_session.sql(models["accounts_in_credit"].sql).collect())
    # the same project through sqlext build (rewritten into native SQL)
    results = build(spark, PROJECT, tmp_path, out=lambda line: None)
    assert [r.status for r in results] == ["OK", "OK"]
    via_sqlext = multiset(spark.read.parquet(str(tmp_path / "accounts_in_credit")).collect())
    assert via_dbt and via_dbt == via_sqlext


def test_fk_join_needs_the_rewrite_that_dbt_does_not_call(spark, view):
    """FK_JOIN has two table arguments, which a registered Python table function cannot take,
    so dbt's plain spark.sql cannot run it; sqlext (sqlext build) rewrites it into SQL."""
    import pytest
    from pyspark.errors import PySparkException

    view("dbt_o", [(1, 7, 1)], "order_id int, customer_id int, _commit_version bigint")
    view("dbt_c", [(7, "Ada", 1)], "id int, name string, _commit_version bigint")
    call = ("SELECT order_id, name FROM FK_JOIN(left => TABLE(dbt_o), right => TABLE(dbt_c), "
            "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', emit => 'final')")
    with pytest.raises(PySparkException):
        spark.sql(call).collect()
    assert ordered(sqlext.sql(spark, call).collect()) == [(1, "Ada")]
