"""Chains of incremental dbt models through the sqlext adapter: a model that reads
``STREAM({{ ref('upstream') }})``, where the upstream is itself an incremental model over
``STREAM(...)``, takes the change rows the upstream appended since its own last run as its
input feed, so the chain runs build by build exactly.

The project (tests/fixtures/dbt_chain) chains three incremental models, CHANGELOG_FILTER over
a raw feed of accounts, then FK_JOIN with a feed of branches, then FK_JOIN (a left join) with a
feed of regions, and ends in an aggregate table. Its singular tests compare each with the same
statements run over the whole feeds (the batch chain in models/batch, made again by every
build), after every build; this module lands change files between builds in one dbt process
(one Spark) and reads the written tables back as well. A full refresh of one link alone then
makes its reader's next run fail with a classed error (rather than skip the rebuilt link's
changes) until the reader is rebuilt too.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from test_dbt import by_type, dbt_in_one_process

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "dbt_chain"
CHAIN = ["gold_accounts", "gold_accounts_branches", "gold_accounts_regions"]
MODELS = {*CHAIN, "balances_per_region", *(f"batch_{m}" for m in [*CHAIN, "balances_per_region"])}
TESTS = {f"{m}_equals_batch" for m in [*CHAIN, "balances_per_region"]}
pytestmark = pytest.mark.spark  # dbt runs in a child process, whose adapter starts Spark

FEEDS = {
    "accounts_feed": [("account_id", "int32"), ("owner", "string"), ("tier", "string"),
                      ("branch_id", "int32"), ("balance", "int64")],
    "branches_feed": [("branch_code", "int32"), ("city", "string"), ("region_code", "int32")],
    "regions_feed": [("region_code", "int32"), ("region_name", "string")],
}
CHANGE_COLUMNS = [("_change_type", "string"), ("_commit_version", "int64")]

# What lands after the first build (whose hook lands versions 1 and 2: Ada, Cy and Dee gold,
# Bob silver; branches 10, 20 and 30 in regions 1, 2 and 3; regions 1 and 2 only), one order
# of versions across the three feeds.
LANDINGS = [
    {  # versions 3 and 4
        "accounts_feed": [
            (2, "Bob", "silver", 10, 50, "update_preimage", 3), (2, "Bob", "gold", 10, 50, "update_postimage", 3),
            (1, "Ada", "gold", 10, 100, "update_preimage", 3), (1, "Ada", "gold", 10, 120, "update_postimage", 3),
            (5, "Eve", "gold", 20, 40, "insert", 4)],
        # branch 20 moves to region 1: Cy's and Eve's rows change with it
        "branches_feed": [(20, "Lima", 2, "update_preimage", 4), (20, "Lima", 1, "update_postimage", 4)],
        # region 3 appears: Dee's row, padded with NULLs so far (a left join), gets its name
        "regions_feed": [(3, "East", "insert", 4)],
    },
    {  # versions 5 and 6
        "accounts_feed": [
            # Cy moves to branch 10 at the version branch 10 changes its city
            (3, "Cy", "gold", 20, 70, "update_preimage", 5), (3, "Cy", "gold", 10, 70, "update_postimage", 5),
            # Ada leaves the gold tier: a delete all down the chain
            (1, "Ada", "gold", 10, 120, "update_preimage", 6), (1, "Ada", "silver", 10, 120, "update_postimage", 6),
            (4, "Dee", "gold", 30, 20, "delete", 6)],
        "branches_feed": [(10, "Oslo", 1, "update_preimage", 5), (10, "Bergen", 1, "update_postimage", 5)],
        "regions_feed": [(1, "North", "update_preimage", 6), (1, "Nord", "update_postimage", 6)],
    },
    {  # versions 7 and 8
        "accounts_feed": [
            # Ada comes back, richer: an insert of a key whose delete an earlier build applied
            (1, "Ada", "silver", 10, 120, "update_preimage", 7), (1, "Ada", "gold", 10, 130, "update_postimage", 7),
            # Eve moves to a branch that has no row yet (the inner join drops her) ...
            (5, "Eve", "gold", 20, 40, "update_preimage", 7), (5, "Eve", "gold", 40, 40, "update_postimage", 7)],
        # ... which lands at version 8 (she is back), in a region deleted at version 8 (NULLs)
        "branches_feed": [(40, "Cusco", 2, "insert", 8), (30, "Pune", 3, "delete", 8)],
        "regions_feed": [(2, "South", "delete", 8)],
    },
]


def feed_file(folder: Path, feed: str, rows: list[tuple], landing: int) -> Path:
    """A Parquet file of one feed's changes, in its landing table's column types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = FEEDS[feed] + CHANGE_COLUMNS
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in columns])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{feed}-{landing}.parquet"
    names = [name for name, _ in columns]
    pq.write_table(pa.Table.from_pylist([dict(zip(names, r)) for r in rows], schema=schema), path)
    return path


def table_rows(project: Path, name: str, columns: list[str]) -> Counter:
    """The rows of a table dbt wrote in the schema chain, read from its Parquet files."""
    import pyarrow.parquet as pq

    table = pq.read_table(project / ".spark" / "warehouse" / "chain.db" / name, columns=columns,
                          ignore_prefixes=["_", "."])
    return Counter(tuple(row[c] for c in columns) for row in table.to_pylist())


# After the landings, Bob's balance changes at version 9: it lands after a full refresh of the
# middle link alone, so that link's reader meets a rebuilt upstream
LATE_LANDING = {"accounts_feed": [(2, "Bob", "gold", 10, 50, "update_preimage", 9),
                                  (2, "Bob", "gold", 10, 55, "update_postimage", 9)]}
# (a build of the whole project makes the batch chain again, over the feeds as they stand)
COMMANDS = [
    ["build"],                                       # 0: the hook's landing (versions 1, 2)
    *[["build"]] * len(LANDINGS),                    # 1-3: after each landing
    ["build", "--full-refresh", "--select", "gold_accounts_branches"],  # 4: the middle link alone
    ["build"],                                       # 5: after version 9 lands
    ["build", "--full-refresh", "--select", "gold_accounts_regions+"],  # 6: its reader and what reads that
]
REFRESHED, AFTER_REFRESH, READERS_REFRESHED = 4, 5, 6


@pytest.fixture(scope="module")
def chain_runs(tmp_path_factory):
    """A copy of the project and the run results of COMMANDS, run in one dbt process with the
    landings made between them."""
    base = tmp_path_factory.mktemp("dbt_chain")
    project = base / "chain"
    shutil.copytree(PROJECT, project)
    raw = project / ".spark" / "warehouse" / "chain_raw.db"
    staging = base / "staging"
    moves = {index: [(feed_file(staging, feed, rows, index), raw / feed) for feed, rows in landing.items()]
             for index, landing in enumerate(LANDINGS, start=1)}
    moves[AFTER_REFRESH] = [(feed_file(staging, feed, rows, 9), raw / feed) for feed, rows in LATE_LANDING.items()]
    done, runs = dbt_in_one_process(project, *COMMANDS, landings=moves)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return project, done, runs


def test_three_chained_incremental_models_equal_the_batch_build_after_every_landing(chain_runs):
    """A build after each landing of change files: every build runs every model and passes
    every singular test (each incremental table equals its
    statement over the whole feeds, as a multiset: a row appended twice fails it; the
    aggregate over the chain equals the aggregate over the batch chain)."""
    project, done, runs = chain_runs
    for index, run in enumerate(runs[:REFRESHED]):
        assert by_type(run, "model") == {m: "success" for m in MODELS}, (index, done.stdout[-6000:])
        assert by_type(run, "test") == {t: "pass" for t in TESTS}, (index, done.stdout[-6000:])


def test_a_full_refresh_of_one_link_alone_stops_its_reader_until_that_is_rebuilt_too(chain_runs):
    """``--full-refresh --select gold_accounts_branches`` rebuilds that link's table from the
    whole history, in new files under the names its first runs' files had, which its reader
    gold_accounts_regions would take for files it already read: it would skip the rebuilt
    link's next changes (Bob's version 9) and still succeed. So the reader's next incremental
    run is refused, with the full refresh to run, and writes nothing; after a full refresh of
    the reader and what reads it, the chain equals the batch build again, version 9 included."""
    project, done, runs = chain_runs
    refreshed, after, readers_refreshed = runs[REFRESHED], runs[AFTER_REFRESH], runs[READERS_REFRESHED]
    assert by_type(refreshed, "model") == {"gold_accounts_branches": "success"}, done.stdout[-6000:]
    assert by_type(refreshed, "test") == {"gold_accounts_branches_equals_batch": "pass"}

    assert by_type(after, "model") == {"gold_accounts": "success", "gold_accounts_branches": "success",
                                       "gold_accounts_regions": "error", "balances_per_region": "skipped",
                                       **{m: "success" for m in MODELS if m.startswith("batch_")}}, \
        done.stdout[-6000:]
    assert by_type(after, "test") == {"gold_accounts_equals_batch": "pass",
                                      "gold_accounts_branches_equals_batch": "pass",
                                      "gold_accounts_regions_equals_batch": "skipped",
                                      "balances_per_region_equals_batch": "skipped"}
    [message] = [r["message"] for r in after["results"] if r["unique_id"].endswith(".gold_accounts_regions")]
    assert "[STREAM_SOURCE_REBUILT]" in message, message
    assert "gold_accounts_branches, which it reads with STREAM(...), is the output of a run that started over" \
        in message, message
    assert "dbt build --full-refresh --select <model>+" in message, message

    assert by_type(readers_refreshed, "model") == {"gold_accounts_regions": "success",
                                                   "balances_per_region": "success"}, done.stdout[-6000:]
    # (the links before it passed theirs, version 9 included, in the build that refused it)
    assert by_type(readers_refreshed, "test") == {"gold_accounts_regions_equals_batch": "pass",
                                                  "balances_per_region_equals_batch": "pass"}, done.stdout[-6000:]
    # the tables as the last build left them: the history of each link as its runs appended it
    # (gold_accounts was never rebuilt), and the aggregate
    # the whole history of each link, as the runs appended it
    assert table_rows(project, "gold_accounts", ["account_id", "balance", "_change_type", "_commit_version"]) \
        == Counter([(1, 100, "insert", 1), (3, 70, "insert", 1), (4, 20, "insert", 2),
                    (2, 50, "insert", 3), (1, 100, "update_preimage", 3), (1, 120, "update_postimage", 3),
                    (5, 40, "insert", 4),
                    (3, 70, "update_preimage", 5), (3, 70, "update_postimage", 5),
                    (1, 120, "delete", 6), (4, 20, "delete", 6),
                    (1, 130, "insert", 7), (5, 40, "update_preimage", 7), (5, 40, "update_postimage", 7),
                    (2, 50, "update_preimage", 9), (2, 55, "update_postimage", 9)])
    assert table_rows(project, "gold_accounts_regions",
                      ["account_id", "city", "region_name", "_change_type", "_commit_version"]) == Counter([
        (1, "Oslo", "North", "insert", 1), (3, "Lima", "South", "insert", 1), (4, "Pune", None, "insert", 2),
        (2, "Oslo", "North", "insert", 3),
        (1, "Oslo", "North", "update_preimage", 3), (1, "Oslo", "North", "update_postimage", 3),
        (5, "Lima", "North", "insert", 4),
        (3, "Lima", "South", "update_preimage", 4), (3, "Lima", "North", "update_postimage", 4),
        (4, "Pune", None, "update_preimage", 4), (4, "Pune", "East", "update_postimage", 4),
        (3, "Lima", "North", "update_preimage", 5), (3, "Bergen", "North", "update_postimage", 5),
        (1, "Oslo", "North", "update_preimage", 5), (1, "Bergen", "North", "update_postimage", 5),
        (2, "Oslo", "North", "update_preimage", 5), (2, "Bergen", "North", "update_postimage", 5),
        (1, "Bergen", "North", "delete", 6), (4, "Pune", "East", "delete", 6),
        (2, "Bergen", "North", "update_preimage", 6), (2, "Bergen", "Nord", "update_postimage", 6),
        (3, "Bergen", "North", "update_preimage", 6), (3, "Bergen", "Nord", "update_postimage", 6),
        (5, "Lima", "North", "update_preimage", 6), (5, "Lima", "Nord", "update_postimage", 6),
        (1, "Bergen", "Nord", "insert", 7), (5, "Lima", "Nord", "delete", 7),
        (5, "Cusco", None, "insert", 8),
        (2, "Bergen", "Nord", "update_preimage", 9), (2, "Bergen", "Nord", "update_postimage", 9)])
    assert table_rows(project, "balances_per_region", ["region_name", "accounts", "balance"]) == Counter([
        ("Nord", 3, 255), (None, 1, 40)])
