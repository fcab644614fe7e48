"""Incremental dbt models over folders of change files: a model's ``sqlext_sources`` config (in
``config()``, or for many models in dbt_project.yml) names the folder each ``STREAM(name)``
reads, and how: its files' format, columns, Spark's reader options and what happens to a
record that cannot be read, as ``sqlext stream`` takes them.

The config is checked before anything runs (its shape, its keys, a path for each folder) with
classed errors, and each folder is read in its own format; the project in
tests/fixtures/dbt_folders then runs in one dbt process (one Spark) with files landing between
runs: strict by default, a bad line fails the run naming its file and line and the table keeps
its rows; with the quarantine the run reads the rest, the record lands in the checkpoint in the
table's folder, dbt's message counts it, and the next run appends exactly the new rows. Reader
options take effect (a CSV header names the columns).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from sqlext.errors import SqlextError

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "dbt_folders"
SQL = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(customers, format => 'debezium')), key => 'id', "
       "predicate => 'true')")


def settings(config) -> dict:
    from dbt.adapters.sqlext.impl import source_settings

    return source_settings(config)


def test_the_config_becomes_the_runs_per_source_settings():
    config = {"customers": {"path": "s3a://bucket/topics/customers", "format": "JSON",
                            "schema": "id BIGINT, name STRING", "options": {"multiLine": False, "encoding": "UTF-8"},
                            "bad_records": "quarantine"},
              # a folder of a mapping shared by many models, which this one does not read
              "orders": {"path": "/data/orders"}}
    assert settings(config) == {
        "sources": {"customers": "s3a://bucket/topics/customers", "orders": "/data/orders"},
        # each folder in its own format (Parquet where none is given): a JSON topic joins a
        # Parquet folder in one model
        "source_format": {"customers": "json", "orders": "parquet"}, "schemas": {"customers": "id BIGINT, name STRING"},
        # YAML's and Jinja's booleans as Spark's reader takes them
        "source_options": {"customers": {"multiLine": "false", "encoding": "UTF-8"}},
        "bad_records": {"customers": "quarantine"}, "schema_evolution": {}}
    assert settings(None) == {}
    assert settings({"customers": {"path": "landing/customers"}})["source_format"] == {"customers": "parquet"}


@pytest.mark.parametrize("config, said", [
    ("landing/customers", r"sqlext_sources must be a mapping of each name STREAM\(name\) reads"),
    ({"customers": "landing/customers"},
     r"the settings of 'customers' in sqlext_sources must be a mapping .*Give the folder as \{'path': "),
    ({"customers": {"paht": "landing/customers"}}, r"got the key 'paht'\. Did you mean 'path'\?"),
    ({"customers": {"format": "json"}}, r"the path of 'customers' in sqlext_sources must be .*; got nothing"),
    ({"customers": {"path": "/d", "options": "header=true"}}, r"the options of 'customers' .* a mapping"),
    ({"customers": {"path": "/d", "schema": ["id BIGINT"]}}, r"the schema of 'customers' .* must be text"),
    ({"customers": {"path": "/d", "schema_evolution": ["add_columns"]}},
     r"the schema_evolution of 'customers' .* must be text"),
])
def test_a_config_of_another_shape_is_a_classed_error(config, said):
    with pytest.raises(SqlextError, match=r"^\[INVALID_ARGUMENT_TYPE\] sqlext dbt: .*" + said):
        settings(config)


def test_an_incremental_runs_errors_name_what_the_user_ran(spark, tmp_path):
    # the engine's errors had said "sqlext stream" from dbt and from Python too
    from dbt.adapters.sqlext.session import as_dbt_errors
    from dbt_common.exceptions import DbtRuntimeError
    from sqlext.streaming import run_into_table

    missing = settings({"customers": {"path": str(tmp_path / "missing"), "format": "json"}})
    with pytest.raises(DbtRuntimeError) as raised, as_dbt_errors():
        run_into_table(spark, SQL, "never_built", **missing)
    assert str(raised.value.msg).startswith("[STREAM_SOURCE_EMPTY] sqlext dbt: "), raised.value
    with pytest.raises(SqlextError) as raised:
        run_into_table(spark, SQL, "never_built", **missing)
    assert str(raised.value).startswith("[STREAM_SOURCE_EMPTY] sqlext.streaming.run_into_table: ")


# -- the project, run by dbt

def event(key: int, name: str, lsn: int) -> str:
    """A Debezium event creating a row, a line of a topic's JSON file."""
    return json.dumps({"before": None, "after": {"id": key, "name": name}, "op": "c", "ts_ms": lsn,
                       "source": {"lsn": lsn}})


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def table_rows(project: Path, name: str, columns: list[str]) -> Counter:
    """The rows of a table dbt wrote, read from its Parquet files (no Spark needed)."""
    import pyarrow.parquet as pq

    table = pq.read_table(project / ".spark" / "warehouse" / "folders.db" / name, columns=columns,
                          ignore_prefixes=["_", "."])
    return Counter(tuple(row[c] for c in columns) for row in table.to_pylist())


@pytest.mark.spark
def test_models_over_folders_run_by_run_strict_quarantined_and_with_reader_options(tmp_path):
    from test_dbt import by_type, dbt_in_one_process

    project = tmp_path / "folders"
    shutil.copytree(PROJECT, project)
    landing, later = project / "landing", tmp_path / "later"
    # what has landed before the first run; a truncated line (line 2) in the quarantined topic
    write(landing / "customers" / "part-1.json", [event(2, "Bob", 20), event(3, "Cy", 30)[:-12],
                                                  event(4, "Dee", 40)])
    write(landing / "customers_strict" / "part-1.json", [event(1, "Ada", 10)])
    write(landing / "accounts" / "part-1.csv", ["id,balance,_change_type,_commit_version",
                                                "1,10,insert,1", "2,-5,insert,1"])
    # what lands before the second run: a bad line 2 in the strict topic
    strict_bad = write(later / "strict" / "part-2.json", [event(5, "Eve", 50), '{"before": null, "after": {"id": 6,'])
    more = write(later / "quarantined" / "part-2.json", [event(7, "Fay", 70)])

    done, (first, second, broken) = dbt_in_one_process(
        project, ["run"], ["run"],
        ["run", "--select", "misspelt_source_settings", "--vars", "{with_broken_models: true}"],
        landings={1: [(strict_bad, landing / "customers_strict"), (more, landing / "customers")]})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "py4j" not in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr

    def messages(results):
        return {r["unique_id"].split(".")[2]: r["message"] for r in results["results"]}

    assert by_type(first, "model") == {"customers_quarantined": "success", "customers_strict": "success",
                                       "accounts_csv": "success"}, done.stdout[-4000:]
    said = messages(first)
    assert said["customers_quarantined"] == "OK (incremental run; quarantined 1 bad record)"
    assert said["customers_strict"] == said["accounts_csv"] == "OK (incremental run)"

    assert by_type(second, "model") == {"customers_quarantined": "success", "customers_strict": "error",
                                        "accounts_csv": "success"}, done.stdout[-4000:]
    said = messages(second)
    assert said["customers_quarantined"] == "OK (incremental run)"
    assert "[BAD_RECORD] sqlext dbt: customers: line 2 of file:" in said["customers_strict"]
    assert "customers_strict/part-2.json" in said["customers_strict"]
    assert "'bad_records': 'quarantine'" in said["customers_strict"]  # the fix, in dbt's words too

    # strict: the failed run wrote nothing (Eve, the good line before the bad one, is not there)
    assert table_rows(project, "customers_strict", ["id", "name", "source_lsn"]) == Counter([(1, "Ada", 10)])
    # quarantined: the good rows of the first file, then exactly Fay's
    assert table_rows(project, "customers_quarantined", ["id", "name", "source_lsn"]) == Counter([
        (2, "Bob", 20), (4, "Dee", 40), (7, "Fay", 70)])
    import pyarrow.parquet as pq

    quarantine = pq.read_table(project / ".spark" / "warehouse" / "folders.db" / "customers_quarantined"
                               / "_sqlext_checkpoint" / "quarantine").to_pylist()
    assert [(q["source"], q["line"], q["file"].endswith("customers/part-1.json"), q["error_class"])
            for q in quarantine] == [("customers", 2, True, "BAD_RECORD")]
    assert quarantine[0]["record"] == event(3, "Cy", 30)[:-12]

    # the header named the columns and inferSchema typed them: the filter on balance held
    assert table_rows(project, "accounts_csv", ["id", "balance", "_change_type", "_commit_version"]) == Counter([
        (1, 10, "insert", 1)])

    assert by_type(broken, "model") == {"misspelt_source_settings": "error"}
    message = messages(broken)["misspelt_source_settings"]
    assert "[INVALID_ARGUMENT_TYPE] sqlext dbt: the settings of 'accounts' in sqlext_sources" in message
    assert "Did you mean 'path'?" in message
