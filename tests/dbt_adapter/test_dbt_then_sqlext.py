"""``dbt build && sqlext sql ...`` in one folder, as a scheduler's script chains them: dbt's
Spark keeps the folder's catalog (``metastore_db``, Spark's default place for it) open, and the
command after dbt must find it free.

PySpark's JVM outlives its Python process by half a second or more; the adapter closes the
catalog as dbt's process ends, so the catalog is free the moment dbt has exited. The command
chained after it runs with a Spark launcher that fails (``SPARK_HOME`` points at a stand-in):
it gets past the catalog check, or is refused with ``CATALOG_IN_USE``, before Spark would start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_dbt import DBT, environment

SQLEXT = Path(sys.executable).with_name("sqlext")
NO_SPARK = "#!/bin/sh\necho 'this command started Spark of its own' >&2\nexit 1\n"
pytestmark = pytest.mark.spark  # dbt runs in a child process, whose adapter starts Spark

PROJECT = {
    "dbt_project.yml": "name: chained\nversion: '1.0'\nprofile: chained\nmodels:\n  chained:\n    +materialized: table\n",
    # the catalog where Spark keeps it by default: metastore_db and spark-warehouse in the folder
    "profiles.yml": "chained:\n  target: dev\n  outputs:\n    dev:\n      type: sqlext\n      schema: chained\n"
                    "      threads: 1\n",
    "models/one.sql": "select 1 as id\n",
}


def test_the_catalog_is_free_as_soon_as_dbt_build_has_exited(tmp_path):
    from sqlext.session_options import catalog_open

    project = tmp_path / "chained"
    for name, text in PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    # dbt's output goes to a file, not a pipe: a pipe stays open until dbt's JVM has ended
    # (it writes there too), and a shell chaining commands waits for dbt's process alone
    with open(tmp_path / "dbt.out", "w") as output:
        built = subprocess.run([str(DBT), "build", "--profiles-dir", str(project)], cwd=project,
                               env=environment(project), stdout=output, stderr=subprocess.STDOUT, timeout=600)
    held = catalog_open(project)  # at once, as the next command of a script
    assert built.returncode == 0, (tmp_path / "dbt.out").read_text()[-4000:]
    assert (project / "metastore_db").is_dir() and not held

    no_spark = tmp_path / "no-spark"
    (no_spark / "bin").mkdir(parents=True)
    for name in ("spark-submit", "spark-class"):
        (no_spark / "bin" / name).write_text(NO_SPARK)
        (no_spark / "bin" / name).chmod(0o755)
    env = {k: v for k, v in environment(project).items() if k != "SPARK_REMOTE"}
    chained = subprocess.run([str(SQLEXT), "sql", "-S", "-e", "SELECT * FROM chained.one"], cwd=project,
                             env=dict(env, SPARK_HOME=str(no_spark)), capture_output=True, text=True, timeout=120)
    assert "CATALOG_IN_USE" not in chained.stderr and "started Spark of its own" in chained.stderr, chained.stderr
