"""The sqlext dbt adapter (profile ``type: sqlext``), run as people run dbt: ``dbt build`` on
the command line, in its own process (and so its own Spark), over a project in the shape real
ones have (tests/fixtures/dbt_shop: seeds, a source landed by a hook, staging views, marts,
a macro, folder configs, generic, custom and singular data tests, incremental models).

Its marts use FK_JOIN, CHANGELOG_FILTER, a self-join that sqlext rewrites into a window and a
recursive CTE; singular tests compare each of them with the rows expected, and this module
reads the written tables back as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "dbt_shop"
DBT = Path(sys.executable).with_name("dbt")

MODELS = {"stg_customers_changes", "stg_orders_changes", "stg_payments", "stg_org_chart",
          "premium_customers_changes", "orders_with_customer", "payments_running_totals",
          "org_chart_levels", "payments_incremental", "gold_customers_feed"}
SEEDS = {"customers_changes", "orders_changes", "payments", "notes"}
# every test here runs dbt in a child process, whose adapter starts Spark
pytestmark = pytest.mark.spark
# the statements of each mart that sqlext must have rewritten, by the rule that did it
REWRITES = {"changelog_filter_to_sql", "fk_join_to_sql", "self_join_aggregate_to_window",
            "recursive_cte_to_expand"}


def environment(project: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "DBT_PROFILES_DIR": str(project),
        "SQLEXT_DBT_HOME": str(project / ".spark"),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    })
    return env


def dbt(project: Path, *arguments: str, after=None) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the dbt command line in ``project``; return the process and its run_results.json.
    Its output goes to files, not pipes, so that this returns when dbt's process has ended, as
    a shell running a script goes on (a pipe stays open until dbt's JVM has ended too: it
    writes there as well); ``after()``, if given, is called at that moment, and what it returns
    is the process's ``after``."""
    results = project / "target" / "run_results.json"
    results.unlink(missing_ok=True)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run([str(DBT), *arguments, "--profiles-dir", str(project)], cwd=project,
                              env=environment(project), stdout=out, stderr=err, timeout=600)
        done.after = after() if after is not None else None
        out.seek(0)
        err.seek(0)
        done.stdout, done.stderr = out.read(), err.read()
    return done, json.loads(results.read_text()) if results.exists() else {}


# Runs dbt commands one after another in one Python process (and so one Spark), as a script
# that calls dbt's programmatic entry point does; before each, moves the files LANDINGS holds
# for it into place (files landing between runs); after each, keeps its run_results.json.
RUN_IN_ONE_PROCESS = """
import shutil, sys
from dbt.cli.main import dbtRunner
for index, arguments in enumerate(COMMANDS):
    for source, target in LANDINGS.get(index, []):
        shutil.move(source, target)
    dbtRunner().invoke(arguments + ["--profiles-dir", "."])
    shutil.copy("target/run_results.json", f"target/run_results_{index}.json")
"""


def dbt_in_one_process(project: Path, *commands: list[str], landings: dict | None = None) \
        -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run several dbt commands in one new process; return it and each command's run results.
    (A Spark start costs most of a dbt command here, so this saves one per extra command.)
    ``landings`` maps a command's index to (file, folder) moves made just before it."""
    for old in (project / "target").glob("run_results_*.json"):
        old.unlink()
    script = (f"COMMANDS = {[list(c) for c in commands]!r}\n"
              f"LANDINGS = {({i: [(str(a), str(b)) for a, b in m] for i, m in (landings or {}).items()})!r}\n"
              + RUN_IN_ONE_PROCESS)
    done = subprocess.run([sys.executable, "-c", script], cwd=project, env=environment(project),
                          capture_output=True, text=True, timeout=600)
    results = [project / "target" / f"run_results_{i}.json" for i in range(len(commands))]
    return done, [json.loads(r.read_text()) if r.exists() else {} for r in results]


def statuses(results: dict) -> dict[str, str]:
    """unique_id -> status, for every node a run ran."""
    return {r["unique_id"]: r["status"] for r in results.get("results", [])}


def by_type(results: dict, kind: str) -> dict[str, str]:
    """name -> status of the nodes of one type (model, seed, test)."""
    return {uid.split(".")[2]: status for uid, status in statuses(results).items() if uid.split(".")[0] == kind}


def table_rows(project: Path, name: str, columns: list[str]) -> Counter:
    """The rows of a table dbt wrote, read from its Parquet files (no Spark needed)."""
    import pyarrow.parquet as pq

    table = pq.read_table(project / ".spark" / "warehouse" / "shop.db" / name, columns=columns,
                          ignore_prefixes=["_", "."])
    return Counter(tuple(row[c] for c in columns) for row in table.to_pylist())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A copy of the project, built once with ``dbt build``; ``done.after`` says whether its
    catalog was still open the moment dbt's process had ended."""
    from sqlext.session_options import catalog_open

    project = tmp_path_factory.mktemp("dbt") / "shop"
    shutil.copytree(PROJECT, project)
    done, results = dbt(project, "build", after=lambda: catalog_open(project / ".spark"))
    return project, done, results


def test_dbt_build_runs_every_model_seed_and_data_test(built):
    project, done, results = built
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert by_type(results, "model") == {name: "success" for name in MODELS}
    assert by_type(results, "seed") == {name: "success" for name in SEEDS}
    tests = by_type(results, "test")
    assert len(tests) == 28 and set(tests.values()) == {"pass"}, tests
    # the singular tests that compare each mart with its expected rows are among them
    assert {"premium_customers_changes_expected", "orders_with_customer_expected",
            "payments_running_totals_expected", "org_chart_levels_expected",
            "gold_customers_feed_equals_batch", "notes_load_as_written"} <= set(tests)
    assert statuses(results)["operation.shop.shop-on-run-start-1"] == "success"
    log = (project / "logs" / "dbt.log").read_text()
    assert {rule for rule in REWRITES if f"sqlext rewrote the statement ({rule}" in log} == REWRITES


def test_the_catalog_is_free_as_soon_as_dbt_build_has_exited(built):
    """dbt build && sqlext sql ... in a script: dbt's JVM outlives its Python process by half a
    second or more; the adapter closes the catalog as dbt's process ends, so the command after
    it finds the catalog free (not CATALOG_IN_USE)."""
    project, done, _ = built
    assert done.returncode == 0 and (project / ".spark" / "metastore_db").is_dir()
    assert done.after is False


def test_the_marts_hold_the_expected_rows(built):
    project, done, _ = built
    assert done.returncode == 0
    assert table_rows(project, "premium_customers_changes",
                      ["customer_id", "tier", "_change_type", "_commit_version"]) == Counter([
        (1, "gold", "insert", 1), (3, "gold", "insert", 1), (2, "gold", "insert", 2),
        (1, "gold", "delete", 3), (3, "gold", "delete", 4)])
    assert table_rows(project, "orders_with_customer", ["order_id", "amount", "name", "tier"]) == Counter([
        (10, Decimal("25.00"), "Ada", "silver"), (11, Decimal("15.50"), "Bob", "gold"),
        (12, Decimal("7.00"), None, None)])
    assert table_rows(project, "payments_running_totals", ["payment_id", "running_total"]) == Counter([
        (100, 10), (101, 30), (103, 60), (102, 5), (104, 20)])
    assert table_rows(project, "org_chart_levels", ["employee_id", "level"]) == Counter([
        (1, 0), (2, 1), (3, 1), (4, 2), (5, 3)])
    # a seed whose values hold quotes and a backslash (dbt-spark pastes them into SQL text)
    assert table_rows(project, "notes", ["id", "note"]) == Counter([
        (1, "kevin parker's favorite"), (2, 'a \\ backslash and "double" quotes'), (3, None)])


FEED_COLUMNS = ["id", "name", "tier", "_change_type", "_commit_version"]


def feed_file(folder: Path, name: str, rows: list[tuple]) -> Path:
    """A Parquet file of customers' changes, in the landing table's column types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("tier", pa.string()),
                        ("_change_type", pa.string()), ("_commit_version", pa.int64())])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(pa.Table.from_pylist([dict(zip(FEED_COLUMNS, r)) for r in rows], schema=schema), path)
    return path


# The runs after the build, in one dbt process (one Spark: its start is most of what a dbt
# command costs here), with changes of raw.customers_feed landing between them. The runs of
# gold_customers_feed (and its data tests) are the feed's, run by run; the refused incremental
# run of premium_customers_changes rides on the first of them and its full refresh on theirs
# (those models read neither the feed nor each other). The first run also builds a model whose
# FK_JOIN call lacks an argument, to see a sqlext error of a statement reach dbt as its classed
# message; every command enables it (only the first selects it), as dbt parses the whole
# project again, not just what changed, when the variables do.
FEED = ["gold_customers_feed+"]
REFUSED = ["premium_customers_changes", "payments_incremental", "fk_join_without_right_key"]
BROKEN = ["--vars", "{with_broken_models: true}"]
LATER_COMMANDS = [
    ["build", "--select", *FEED, *REFUSED, *BROKEN],                # 0: after version 3
    ["build", "--select", *FEED, *BROKEN],                          # 1: after version 4
    ["build", "--select", *FEED, *BROKEN],                          # 2: nothing new
    ["build", "--full-refresh", "--select", *FEED, "premium_customers_changes", *BROKEN],  # 3
    ["run", "--select", "gold_customers_feed", *BROKEN],            # 4: after a late change
]
FEED_RUNS, FEED_REFRESH, LATE = [0, 1, 2, 3], 3, 4


@pytest.fixture(scope="module")
def later_runs(built, tmp_path_factory):
    """The built project after LATER_COMMANDS, run in one dbt process with the landings made
    between them; the process, each command's run results, and the rows gold_customers_feed
    held after the build, before them."""
    project, first, _ = built
    assert first.returncode == 0
    before = table_rows(project, "gold_customers_feed", ["id", "_change_type", "_commit_version"])
    staging = tmp_path_factory.mktemp("feed")
    landing = project / ".spark" / "warehouse" / "shop_raw.db" / "customers_feed"
    version_3 = feed_file(staging, "changes-3.parquet", [
        (1, "Ada", "gold", "update_preimage", 3), (1, "Ada", "silver", "update_postimage", 3)])
    version_4 = feed_file(staging, "changes-4.parquet", [(3, "Cy", "gold", "delete", 4)])
    late = feed_file(staging, "changes-late.parquet", [(1, "Ada", "gold", "update_postimage", 2)])
    done, runs = dbt_in_one_process(project, *LATER_COMMANDS,
                                    landings={0: [(version_3, landing)], 1: [(version_4, landing)],
                                              LATE: [(late, landing)]})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return project, done, runs, before


def test_an_incremental_run_over_changelog_filter_is_refused_and_a_full_refresh_works(later_runs):
    """premium_customers_changes filters its change feed with is_incremental() before
    CHANGELOG_FILTER: on an incremental run that would turn updates into inserts, so the run
    is refused with a classed error. An incremental model without sqlext functions runs
    incrementally as usual, and --full-refresh rebuilds the refused one."""
    project, done, runs, _ = later_runs
    results, refreshed = runs[0], runs[FEED_REFRESH]
    models = by_type(results, "model")
    assert models == {"premium_customers_changes": "error", "payments_incremental": "success",
                      "fk_join_without_right_key": "error", "gold_customers_feed": "success"}, done.stdout[-4000:]
    messages = {r["unique_id"].split(".")[2]: r["message"] for r in results["results"]}
    error = messages["premium_customers_changes"]
    assert "[INCREMENTAL_MODEL_UNSUPPORTED] sqlext dbt: model premium_customers_changes" in error
    assert "CHANGELOG_FILTER" in error and "[INCREMENTAL_MODEL_UNSUPPORTED]" in done.stdout
    assert "[MISSING_ARGUMENT] FK_JOIN: the argument right_key is required" in messages["fk_join_without_right_key"]

    assert by_type(refreshed, "model") == {"premium_customers_changes": "success", "gold_customers_feed": "success"}, \
        done.stdout[-4000:]
    tests = by_type(refreshed, "test")
    assert set(tests.values()) == {"pass"} and "premium_customers_changes_expected" in tests, tests
    assert sum(table_rows(project, "premium_customers_changes", ["customer_id"]).values()) == 5


def test_an_incremental_model_over_streams_keeps_a_correct_change_feed_run_by_run(later_runs):
    """gold_customers_feed reads STREAM(raw.customers_feed): each dbt run processes only the
    changes that landed since the last run, and the model's table always equals the batch
    CHANGELOG_FILTER over the whole feed (the singular data test checks it after every run).
    Ada's update at version 3, whose earlier version an earlier run saw, comes out as her
    leaving the gold tier (a delete), not as a new row; a run with nothing new adds nothing;
    a full refresh rebuilds the same rows from the whole feed. A change landing late (a version
    the runs already passed) then fails the run with its classed error alone: no py4j
    traceback of the failed micro-batch before it, and the table is left as it was."""
    project, done, runs, before = later_runs
    assert before == Counter([(1, "insert", 1), (3, "insert", 1), (2, "insert", 2)])
    late_run = runs[LATE]
    assert by_type(late_run, "model") == {"gold_customers_feed": "error"}, done.stdout[-4000:]
    [message] = [r["message"] for r in late_run["results"] if r["unique_id"].endswith(".gold_customers_feed")]
    assert "[LATE_CHANGE]" in message, message
    assert "py4j" not in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
    for index in FEED_RUNS:
        models = by_type(runs[index], "model")
        assert models.pop("gold_customers_feed") == "success", (index, done.stdout[-4000:])
        assert set(models) <= set(REFUSED), models  # the other models of a run the feed shares
        assert by_type(runs[index], "test")["gold_customers_feed_equals_batch"] == "pass", index
    assert table_rows(project, "gold_customers_feed", ["id", "_change_type", "_commit_version"]) == Counter([
        (1, "insert", 1), (3, "insert", 1), (2, "insert", 2), (1, "delete", 3), (3, "delete", 4)])
