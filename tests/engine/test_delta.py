"""Delta tables' change data feeds (sqlext.delta): tables written with deltalake, commit by
commit, read by batch statements (TABLE(delta.`path`), table_changes) and by incremental runs
(STREAM(delta.`path`), a folder source holding a Delta table), against the same statements over
the same changes as Parquet change rows; and the errors of what cannot be read."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from delta_tables import commit, create, write_table
from feeds import CDF_SCHEMA, cdf_rows, compact, computed_on, run_filter
from rows import added, multiset
from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now
from kafka_3902 import CASES
from kip_213 import LEFT_CDF, RIGHT_CDF, feed, fk_join
from kip_213 import SEED_EVENTS as KIP_213_EVENTS
from kip_213 import SEED_EXPECTED as KIP_213_EXPECTED

# five commits: inserts, updates (one to a value the filter drops), deletes, a re-insert
FIVE_COMMITS = [(1, 1, 5), (1, 2, -3), (1, 3, 8),
                (2, 1, 7), (2, 2, 4),
                (3, 1, None), (3, 3, -2),
                (4, 4, 6), (4, 2, 9),
                (5, 1, 2), (5, 4, None), (5, 3, 1)]


def filter_sql(source: str, emit: str = "changes") -> str:
    return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({source}), key => 'id', predicate => 'v >= 0', "
            f"emit => '{emit}')")


def delta_name(uri: str) -> str:
    return "delta.`" + uri.replace("`", "``") + "`"


@pytest.fixture
def root():
    folder = Path(tempfile.mkdtemp(prefix="sqlext-delta-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def batch(spark, sql: str) -> list[dict]:
    return [r.asDict() for r in sqlext.sql(spark, sql).collect()]


class Runs:
    """Incremental runs into one output folder; :meth:`run` gives the rows a run added."""

    def __init__(self, spark, root: Path, storage, sources: dict | None = None):
        self.spark, self.root, self.storage = spark, root, storage
        self.options = dict(checkpoint=storage.uri(root / "checkpoint"), output=storage.uri(root / "out"),
                            sources=sources or {})
        self.seen: list[dict] = []
        self.jobs: list[int] = []  # the Spark jobs of each run

    def run(self, sql: str, path: str = "auto") -> list[dict]:
        from sqlext.streaming import jobs_of

        with computed_on(self.spark, path):
            query = run_available_now(self.spark, sql, **self.options)
        self.jobs.append(len(jobs_of(self.spark, query)))
        rows = [r.asDict() for r in self.spark.read.parquet(self.options["output"]).collect()] \
            if any((self.root / "out").glob("*.parquet")) else []
        new, self.seen = added(rows, self.seen), rows
        return new


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_five_commits_run_by_run_give_the_batch_rows(spark, root, storage, path, view):
    """A run after each commit forwards the rows of that commit that the batch statement over
    the whole table gives, and the batch statement over the table gives what it gives over the
    same changes as Parquet change rows. On the driver, a run starts no Spark job. A sixth run,
    with no new commit, writes nothing."""
    from sqlext.streaming.summary import RunCounter

    rows = cdf_rows(FIVE_COMMITS)
    table = storage.uri(root / "accounts")
    create(root / "accounts", CDF_SCHEMA)
    runs = Runs(spark, root, storage)
    outputs = {}
    for version in range(1, 6):
        assert commit(root / "accounts", CDF_SCHEMA, "id", [r for r in rows if r["_commit_version"] == version]) \
            == version
        outputs[version] = runs.run(filter_sql(f"STREAM({delta_name(table)})"), path)
    over_delta = batch(spark, filter_sql(delta_name(table)))
    spark.createDataFrame(rows, CDF_SCHEMA).write.parquet(str(root / "changes"))
    over_parquet = batch(spark, filter_sql(f"parquet.`{root / 'changes'}`"))
    assert multiset(over_delta) == multiset(over_parquet)
    for version, got in outputs.items():
        assert multiset(got) == multiset(r for r in over_delta if r["_commit_version"] == version), version
    assert {r["_change_type"] for r in over_delta} == {"insert", "update_preimage", "update_postimage", "delete"}
    if path == "driver":  # the staged commits are read as any folder's files: without a Spark job
        assert runs.jobs == [0] * 5

    counter = RunCounter(spark, runs.options["checkpoint"], runs.options["output"])
    assert runs.run(filter_sql(f"STREAM({delta_name(table)})"), path) == []
    counts = counter.counts()
    assert (counts.batches, counts.files_written) == (0, 0)
    assert counts.describe().startswith("nothing new")


def _case_events():
    """KAFKA-3902's case table, each case on its own key."""
    return [(version, index, *rest) for index, (case_events, *_) in enumerate(CASES.values())
            for version, _key, *rest in case_events]


def test_the_kafka_3902_cases_as_delta_commits_give_the_parquet_rows(spark, root, storage, capsys):
    """The case table written as one commit per version, read from a folder source given by
    name (the command line's --source NAME=DIR), one commit per run: each run forwards the
    batch rows of its version over the Parquet change rows; so does the batch statement over
    the table, in every emit mode that does not forward deletes of rows never there (a Delta
    table records no such delete)."""
    from sqlext.cli import main

    events = _case_events()
    rows = cdf_rows(events)
    parquet = {emit: run_filter("native", spark, "cdf", events, emit=emit) for emit in ("changes", "final")}
    folder = root / "accounts"
    write_table(folder, CDF_SCHEMA, "id", rows)
    for emit in ("changes", "final"):
        got = batch(spark, filter_sql(delta_name(storage.uri(folder)), emit))
        assert compact(got, emit) == compact(parquet[emit], emit), emit

    # the same cases run by run: a fresh table that grows a commit per run
    shutil.rmtree(folder)
    create(folder, CDF_SCHEMA)
    query = root / "filter.sql"
    query.write_text(filter_sql("STREAM(accounts)") + ";\n")
    argv = ["stream", str(query), "--source", f"accounts={storage.uri(folder)}", "--checkpoint",
            storage.uri(root / "checkpoint"), "--output", storage.uri(root / "out")]
    seen: list[dict] = []
    for version in sorted({e[0] for e in events}):
        commit(folder, CDF_SCHEMA, "id", [r for r in rows if r["_commit_version"] == version])
        assert main(argv) == 0
        assert "read 1 file" in capsys.readouterr().out
        out = [r.asDict() for r in spark.read.parquet(storage.uri(root / "out")).collect()]
        new = list((multiset(out) - multiset(seen)).elements())
        seen = out
        assert sorted(compact([dict(r) for r in new], "changes"), key=repr) == sorted(
            [c for c in compact(parquet["changes"], "changes") if c[2] == version], key=repr), version
    assert main(argv) == 0
    assert "nothing new" in capsys.readouterr().out


@pytest.fixture(scope="module")
def kip_213_tables():
    """KIP-213's event table as two Delta tables (orders, customers) with a commit per event's
    version in both (empty in the table the event does not change), so their versions are the
    event table's one order."""
    folder = Path(tempfile.mkdtemp(prefix="sqlext-delta-fk-"))
    last = max(e[0] for e in KIP_213_EVENTS)
    write_table(folder / "orders", LEFT_CDF, "id", _side_rows("left"), last)
    write_table(folder / "customers", RIGHT_CDF, "rid", _side_rows("right"), last)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _side_rows(side: str) -> list[dict]:
    return feed([(v, k, r) for v, s, k, r in KIP_213_EVENTS if s == side], "cdf", "id" if side == "left" else "rid")


def join_sql(left: str, right: str, join_type: str, emit: str) -> str:
    return (f"SELECT * FROM FK_JOIN(left => TABLE({left}), right => TABLE({right}), left_key => 'id', "
            f"foreign_key => 'fk', right_key => 'rid', join_type => '{join_type}', emit => '{emit}')")


@pytest.mark.parametrize("join_type, emit", list(KIP_213_EXPECTED))
def test_the_kip_213_event_table_as_delta_commits_gives_the_parquet_rows_in_batch(spark, kip_213_tables, join_type,
                                                                                  emit):
    from kip_213 import compact as join_compact

    left, right = (delta_name(str(kip_213_tables / name)) for name in ("orders", "customers"))
    got = batch(spark, join_sql(left, right, join_type, emit))
    assert join_compact(got, emit) == join_compact(fk_join(spark, KIP_213_EVENTS, "cdf", join_type, emit), emit)


@pytest.mark.parametrize("join_type, emit", [("left", "changes"), ("inner", "records")])
def test_the_kip_213_event_table_as_delta_commits_one_commit_per_run(spark, root, storage, join_type, emit):
    """Both tables grow a commit per run; each run forwards the Parquet form's batch rows of
    its version."""
    from kip_213 import compact as join_compact

    expected = join_compact(fk_join(spark, KIP_213_EVENTS, "cdf", join_type, emit), emit)
    sides = {"orders": (LEFT_CDF, "id", _side_rows("left")), "customers": (RIGHT_CDF, "rid", _side_rows("right"))}
    for name, (ddl, _key, _rows) in sides.items():
        create(root / name, ddl)
    runs = Runs(spark, root, storage, sources={name: storage.uri(root / name) for name in sides})
    for version in range(1, max(e[0] for e in KIP_213_EVENTS) + 1):
        for name, (ddl, key, rows) in sides.items():
            commit(root / name, ddl, key, [r for r in rows if r["_commit_version"] == version])
        got = join_compact(runs.run(join_sql("STREAM(orders)", "STREAM(customers)", join_type, emit)), emit)
        assert got == [r for r in expected if r[4] == version], version


def _feed(path: str, start: int, end: int | None = None) -> list[dict]:
    """The change rows deltalake itself reads, without their commit times."""
    import pyarrow as pa
    from deltalake import DeltaTable

    rows = pa.table(DeltaTable(path).load_cdf(starting_version=start, ending_version=end).read_all())
    return [{k: v for k, v in r.items() if k != "_commit_timestamp"} for r in rows.to_pylist()]


def test_table_changes_reads_a_range_of_commits(spark, root):
    """The change rows of the commits asked for, the table's columns then the change columns;
    a delete carries the row as the table held it (its ts is the row's, not the delete's)."""
    rows = cdf_rows(FIVE_COMMITS)
    write_table(root / "accounts", CDF_SCHEMA, "id", rows)
    path = str(root / "accounts")
    everything = sqlext.sql(spark, f"SELECT * FROM table_changes('{path}', 0)")
    assert everything.columns == ["id", "name", "v", "ts", "_change_type", "_commit_version"]
    assert multiset(r.asDict() for r in everything.collect()) == multiset(_feed(path, 0))
    assert multiset({**r, "ts": None} for r in _feed(path, 0)) == multiset({**r, "ts": None} for r in rows)
    ranged = batch(spark, f"SELECT c.* FROM table_changes('delta.`{path}`', 2, 3) AS c")
    assert multiset(ranged) == multiset(_feed(path, 2, 3))
    assert {r["_commit_version"] for r in ranged} == {2, 3}
    joined = batch(spark, f"SELECT c.id, c._commit_version FROM (table_changes('{path}', 4, 4) AS c JOIN "
                          f"table_changes('{path}', 5) AS d ON c.id = d.id)")
    assert sorted((r["id"], r["_commit_version"]) for r in joined) == [(4, 4)]  # account 4: opened, then closed
    for versions in ("6", "2, 6", "3, 2"):  # past the latest version (5), or backwards
        with pytest.raises(SqlextError) as past:
            sqlext.sql(spark, f"SELECT * FROM table_changes('{path}', {versions})")
        assert past.value.error_class == "DELTA_CHANGES_UNREADABLE", versions
        assert "latest is 5" in str(past.value)
    for arguments in ("'accounts', 1", f"'{path}'", f"'{path}', '2026-01-01'"):
        with pytest.raises(SqlextError) as wrong:
            sqlext.sql(spark, f"SELECT * FROM table_changes({arguments})")
        assert wrong.value.error_class == "INVALID_ARGUMENT_TYPE", arguments
    assert not any(t.name.startswith("__sx_delta") for t in spark.catalog.listTables())


def test_what_cannot_be_read_is_a_classed_error(spark, root, monkeypatch):
    from deltalake import write_deltalake

    from delta_tables import data_schema
    from sqlext.delta import DeltaChanges, spark_reads_delta, store_location

    assert not spark_reads_delta(spark)  # the embedded session has no Delta Lake: deltalake reads
    write_deltalake(str(root / "no_feed"), data_schema(CDF_SCHEMA).empty_table())
    (root / "not_a_table").mkdir()
    for folder in ("no_feed", "not_a_table"):
        with pytest.raises(SqlextError) as error:
            sqlext.sql(spark, filter_sql(delta_name(str(root / folder))))
        assert error.value.error_class == "DELTA_CHANGES_UNREADABLE", folder
        assert str(root / folder) in str(error.value)

    class Elsewhere:  # a folder in a store deltalake does not open
        uri = store_uri = "hdfs://namenode/warehouse/accounts"

    with pytest.raises(SqlextError) as error:
        store_location(spark, Elsewhere(), Elsewhere.uri, "sqlext stream")
    assert error.value.error_class == "DELTA_PATH_UNSUPPORTED"

    class Remote:  # a Spark Connect session: no JVM, so the path is handed over as given
        pass

    assert DeltaChanges(Remote(), str(root / "no_feed"), "sqlext sql").uri == str(root / "no_feed")
    with pytest.raises(SqlextError) as error:
        DeltaChanges(Remote(), Elsewhere.uri, "sqlext sql")
    assert error.value.error_class == "DELTA_PATH_UNSUPPORTED"

    monkeypatch.setitem(sys.modules, "deltalake", None)  # as if it were not installed
    with pytest.raises(SqlextError) as error:
        sqlext.sql(spark, filter_sql(delta_name(str(root / "no_feed"))))
    assert error.value.error_class == "DELTA_NOT_INSTALLED"
    assert 'pip install "sqlext[delta]"' in str(error.value)


@pytest.mark.storage("viewfs")
def test_a_run_redone_after_a_crash_reads_each_commit_once(spark, root, storage):
    """The states a crash can leave: commits staged but their version not recorded (killed while
    staging), and a batch whose output is written but not committed (killed before the
    checkpoint's commit). The next run stages nothing twice and redoes the batch: the output
    holds every row of the batch statement once."""
    from sqlext.delta import OFFSET_FILE, STAGED_FOLDER

    rows = cdf_rows(FIVE_COMMITS)
    table = delta_name(storage.uri(root / "accounts"))
    create(root / "accounts", CDF_SCHEMA)
    runs = Runs(spark, root, storage)
    for version in (1, 2):
        commit(root / "accounts", CDF_SCHEMA, "id", [r for r in rows if r["_commit_version"] == version])
    runs.run(filter_sql(f"STREAM({table})"))
    staged, = (root / "checkpoint" / STAGED_FOLDER).iterdir()
    (staged / OFFSET_FILE).unlink()
    last = max(int(p.name) for p in (root / "checkpoint" / "commits").iterdir() if p.name.isdigit())
    (root / "checkpoint" / "commits" / str(last)).unlink()
    commit(root / "accounts", CDF_SCHEMA, "id", [r for r in rows if r["_commit_version"] == 3])
    runs.run(filter_sql(f"STREAM({table})"))
    assert sorted(p.name for p in staged.glob("commit-*.parquet")) == [f"commit-{v:020d}.parquet" for v in (1, 2, 3)]
    assert multiset(runs.seen) == multiset(batch(spark, filter_sql(table)))


def test_the_delta_example_runs_and_its_runs_give_the_batch_rows(spark, root, capsys):
    """sql_examples/delta_accounts.py: its incremental runs' output is its batch query's rows."""
    import importlib.util

    example = Path(__file__).resolve().parents[2] / "sql_examples" / "delta_accounts.py"
    spec = importlib.util.spec_from_file_location("delta_accounts", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = module.main(spark, str(root))
    assert got["batch"] and multiset(got["runs"]) == multiset(got["batch"])
    assert {r["_change_type"] for r in got["batch"]} == {"insert", "update_preimage", "update_postimage", "delete"}
    printed = capsys.readouterr().out
    assert "|  3|carol|     15|          delete|              4|" in printed  # carol overdraws: she leaves


def test_the_spellings_of_a_delta_table_parse_without_spark():
    """Spark's ``delta.`path``` parses as it is, in a FROM, a TABLE(...) argument and inside
    STREAM(...); table_changes takes either form of the path."""
    from sqlglot import exp

    from sqlext.delta import _table_changes_arguments, path_of
    from sqlext.language.dialect import parse_one, stream_argument, to_sql

    sql = ("SELECT * FROM FK_JOIN(left => TABLE(delta.`/data/o``rders`), right => TABLE(STREAM(delta.`s3a://b/c`)), "
           "left_key => 'id', foreign_key => 'fk', right_key => 'rid')")
    tree = parse_one(sql)
    assert to_sql(tree) == sql
    tables = [t for t in tree.find_all(exp.Table) if t.this.name.upper() != "FK_JOIN"]
    assert path_of(tables[0]) == "/data/o`rders"
    assert path_of(stream_argument(tables[1].this)) == "s3a://b/c"
    for spelling in ("'/data/t'", "'delta.`/data/t`'"):
        call = parse_one(f"SELECT * FROM table_changes({spelling}, 2, 5)").find(exp.Table).this
        assert _table_changes_arguments(call) == ("/data/t", 2, 5)


def test_staging_reads_a_long_history_a_bounded_number_of_commits_at_a_time(spark, root, monkeypatch):
    """Staged two commits at a time, five commits give the same files as staged at once."""
    import pyarrow.parquet as pq

    from sqlext import delta
    from sqlext.storage import local

    rows = cdf_rows(FIVE_COMMITS)
    write_table(root / "accounts", CDF_SCHEMA, "id", rows)
    feed = delta.DeltaChanges(spark, str(root / "accounts"), "sqlext stream")
    schema = feed.schema()
    feed.stage(local(root / "all"), schema)
    monkeypatch.setattr(delta, "STAGE_COMMITS", 2)
    feed.stage(local(root / "by_two"), schema)
    names = sorted(p.name for p in (root / "all").glob("commit-*.parquet"))
    assert names == [f"commit-{v:020d}.parquet" for v in range(1, 6)]
    assert sorted(p.name for p in (root / "by_two").glob("commit-*.parquet")) == names
    for name in names:
        assert pq.read_table(root / "all" / name).equals(pq.read_table(root / "by_two" / name))


def test_a_streaming_frame_over_a_delta_table_stages_its_commits_in_the_checkpoint_given(spark, root):
    """streaming_frame, for any sink: the commits are staged in the checkpoint it is given; without
    one it cannot tell which commits are new, and says so."""
    from sqlext.delta import STAGED_FOLDER
    from sqlext.streaming import streaming_frame

    write_table(root / "accounts", CDF_SCHEMA, "id", cdf_rows(FIVE_COMMITS[:3]))
    sql = filter_sql(f"STREAM({delta_name(str(root / 'accounts'))})")
    with pytest.raises(SqlextError) as error:
        streaming_frame(spark, sql)
    assert error.value.error_class == "UNSUPPORTED_STREAM"
    frame = streaming_frame(spark, sql, checkpoint=str(root / "checkpoint"))
    assert frame.isStreaming and frame.columns == ["id", "name", "v", "ts", "_change_type", "_commit_version"]
    staged, = (root / "checkpoint" / STAGED_FOLDER).iterdir()
    assert [p.name for p in staged.glob("commit-*.parquet")] == [f"commit-{1:020d}.parquet"]


def _store_location_under(spark, settings: dict, uri: str, store_uri: str | None):
    """What deltalake is given for a folder at ``uri`` while Spark's Hadoop settings hold
    ``settings``."""
    from sqlext.delta import store_location

    class Resolved:
        pass

    folder = Resolved()
    folder.uri, folder.store_uri = uri, store_uri
    conf = spark._jsc.hadoopConfiguration()
    try:
        for key, value in settings.items():
            conf.set(key, value)
        return store_location(spark, folder, uri, "sqlext sql")
    finally:
        for key in settings:
            conf.unset(key)


def test_s3_keys_and_endpoint_come_from_sparks_s3a_settings(spark):
    """deltalake is given the keys and endpoint Spark's s3a connector has for the bucket (its
    per-bucket settings first); nothing is looked up on S3 itself."""
    settings = {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK", "fs.s3a.bucket.lake.endpoint": "http://minio:9000"}
    uri, options = _store_location_under(spark, settings, "s3a://lake/accounts", "s3a://lake/accounts")
    assert uri == "s3://lake/accounts"
    assert options == {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_ENDPOINT_URL": "http://minio:9000",
                       "AWS_ALLOW_HTTP": "true"}


def test_deltalake_is_given_the_azure_credential_hadoop_has(spark):
    """An Azure account's key from Spark's ``fs.azure.*`` settings (the account's host first),
    as deltalake names it."""
    uri = "abfss://data@lake.dfs.core.windows.net/accounts"
    found = _store_location_under(spark, {"fs.azure.account.key.lake.dfs.core.windows.net": "K1"}, uri, None)
    assert found == (uri, {"azure_storage_account_name": "lake", "azure_storage_account_key": "K1"})


# -- the output of incremental runs as a Delta table (output_format="delta")

def _land(spark, storage, folder: Path, version: int) -> None:
    """The change rows of one version of FIVE_COMMITS as a new Parquet file of a folder source."""
    events = [e for e in FIVE_COMMITS if e[0] == version]
    spark.createDataFrame(cdf_rows(events), CDF_SCHEMA).coalesce(1).write.mode("append").parquet(storage.uri(folder))


def _delta_rows(folder: Path) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(folder)).to_pyarrow_table().to_pylist()


def _lose_the_last_commit(checkpoint: Path) -> int:
    """Spark's record of the last batch taken away, as a crash after the batch's function
    returned leaves it: the next run redoes that batch. Returns its id."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.mark.parametrize("emit", ["changes", "final"])
@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_delta_output_holds_the_batch_rows_after_every_run_in_one_commit_a_run(spark, root, storage, path, emit):
    """output_format='delta': after every run the table deltalake reads holds the batch
    statement's rows over the changes so far (the runs' change rows, or the final table,
    replaced in the same commit), each run one commit. A batch redone after its commit (Spark's
    record of it lost) commits nothing: the table's version does not move, and the run's
    summary counts the files and rows of the batch it committed."""
    from deltalake import DeltaTable

    from sqlext.streaming.summary import RunCounter

    out = root / "out"
    options = dict(checkpoint=storage.uri(root / "checkpoint"), output=storage.uri(out),
                   sources={"changes": storage.uri(root / "changes")}, output_format="delta")
    sql = filter_sql("STREAM(changes)", emit)
    versions = []
    for version in range(1, 6):
        _land(spark, storage, root / "changes", version)
        with computed_on(spark, path):
            run_available_now(spark, sql, **options)
        versions.append(DeltaTable(str(out)).version())
        expected = run_filter("native", spark, "cdf", [e for e in FIVE_COMMITS if e[0] <= version], emit=emit)
        assert multiset(_delta_rows(out)) == multiset(expected), version
    assert versions == [0, 1, 2, 3, 4]

    rows = _delta_rows(out)
    redone = _lose_the_last_commit(root / "checkpoint")
    counter = RunCounter(spark, options["checkpoint"], options["output"], "delta")
    with computed_on(spark, path):
        run_available_now(spark, sql, **options)
    assert DeltaTable(str(out)).version() == 4 and multiset(_delta_rows(out)) == multiset(rows)
    counts = counter.counts()
    files = pa.table(DeltaTable(str(out)).get_add_actions())
    mine = [n for n, name in zip(files["num_records"].to_pylist(), files["path"].to_pylist())
            if name.split("-")[1] == f"{redone:010d}"]
    assert counts.batches == 1 and mine
    assert (counts.files_written, counts.rows_written) == (len(mine), sum(mine))


def test_a_delta_output_shows_nothing_of_a_batch_whose_commit_failed(spark, root, storage, monkeypatch):
    """A batch that fails after its files are written and its state committed, before its
    Delta commit: the table stays as the batch before left it, and the next run commits the
    batch once."""
    from deltalake import DeltaTable

    from sqlext.delta import DeltaOutput

    out = root / "out"
    options = dict(checkpoint=storage.uri(root / "checkpoint"), output=storage.uri(out),
                   sources={"changes": storage.uri(root / "changes")}, output_format="delta")
    sql = filter_sql("STREAM(changes)")
    _land(spark, storage, root / "changes", 1)
    run_available_now(spark, sql, **options)
    before = _delta_rows(out)
    _land(spark, storage, root / "changes", 2)
    commit_ = DeltaOutput.commit

    def fail(self, files, *args, **kwargs):
        assert files  # the batch's files are written
        raise OSError("the store went away")

    monkeypatch.setattr(DeltaOutput, "commit", fail)
    with pytest.raises(Exception, match="the store went away"):
        run_available_now(spark, sql, **options)
    assert DeltaTable(str(out)).version() == 0 and multiset(_delta_rows(out)) == multiset(before)
    monkeypatch.setattr(DeltaOutput, "commit", commit_)
    run_available_now(spark, sql, **options)
    assert DeltaTable(str(out)).version() == 1
    assert multiset(_delta_rows(out)) == multiset(run_filter("native", spark, "cdf",
                                                             [e for e in FIVE_COMMITS if e[0] <= 2]))


def test_the_cli_streams_a_statement_without_state_into_a_delta_table(spark, root, storage, capsys):
    """``sqlext stream --output-format delta`` of a filter that keeps no state: each run one
    commit of its rows, and the summary counts the files and rows the commit added."""
    import re

    from deltalake import DeltaTable

    from sqlext.cli import main

    query = root / "positive.sql"
    query.write_text("SELECT id, v, _commit_version FROM STREAM(changes) WHERE v >= 0\n")
    argv = ["stream", str(query), "--source", f"changes={storage.uri(root / 'changes')}", "--checkpoint",
            storage.uri(root / "checkpoint"), "--output", storage.uri(root / "out"), "--output-format", "delta"]
    for version in (1, 2):
        _land(spark, storage, root / "changes", version)
        capsys.readouterr()
        assert main(argv) == 0
        said = re.search(r"wrote (\d+) files?, (\d+) rows?", capsys.readouterr().out)
        new = [e for e in FIVE_COMMITS if e[0] == version and e[2] is not None and e[2] >= 0]
        assert said is not None and int(said[1]) >= 1 and int(said[2]) == len(new)
        assert DeltaTable(str(root / "out")).version() == version - 1
    assert multiset(_delta_rows(root / "out")) == multiset(
        {"id": key, "v": v, "_commit_version": version} for version, key, v in FIVE_COMMITS
        if version <= 2 and v is not None and v >= 0)


def test_a_delta_output_without_deltalake_is_a_classed_error(spark, root, monkeypatch):
    """Where deltalake is not installed, a run into a Delta table is refused before it starts."""
    from sqlext.streaming import stream

    spark.createDataFrame(cdf_rows(FIVE_COMMITS[:3]), CDF_SCHEMA).write.parquet(str(root / "changes"))
    monkeypatch.setitem(sys.modules, "deltalake", None)
    with pytest.raises(SqlextError) as error:
        stream(spark, filter_sql("STREAM(changes)"), checkpoint=str(root / "checkpoint"), output=str(root / "out"),
               sources={"changes": str(root / "changes")}, output_format="delta")
    assert error.value.error_class == "DELTA_NOT_INSTALLED" and "writing the output to" in str(error.value)
    assert not (root / "out").exists() and not (root / "checkpoint").exists()


# ---- commits without change data files -------------------------------------------------

ACCOUNTS_SQL = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE({}), key => 'id', predicate => 'balance >= 0', "
                "emit => '{}')")


def _accounts(path: Path, balances: dict):
    """A table of accounts (id, balance) with its change data feed on, at version 0."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(path), pa.table({"id": list(balances), "balance": list(balances.values())}),
                    configuration={"delta.enableChangeDataFeed": "true"})


def _without_change_files(path: Path, version: int) -> bool:
    """Whether commit ``version`` of a table wrote no change data files (Delta's protocol then
    has its changes read from the files it removed and added)."""
    import json

    log = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return not any("cdc" in action for action in actions) and any("remove" in action for action in actions)


def test_an_update_that_changes_nothing_is_no_change_in_batch_and_run_by_run(spark, root, storage):
    """deltalake's update of a row to the balance it already has rewrites the row's file without
    change data files: the commit's changes are the removed file's rows (deletes) and the added
    file's (inserts), every one unchanged. They cancel: the batch statement and an incremental run
    see no change at that version, in every emit mode."""
    from deltalake import DeltaTable

    path = root / "accounts"
    _accounts(path, {1: 5, 2: 7})
    runs = Runs(spark, root, storage, sources={"accounts": storage.uri(path)})
    stream_sql = ACCOUNTS_SQL.format("STREAM(accounts)", "changes")
    assert multiset(runs.run(stream_sql)) == multiset(
        [{"id": 1, "balance": 5, "_change_type": "insert", "_commit_version": 0},
         {"id": 2, "balance": 7, "_change_type": "insert", "_commit_version": 0}])
    DeltaTable(str(path)).update(updates={"balance": "5"}, predicate="id = 1")
    assert _without_change_files(path, 1)
    assert runs.run(stream_sql) == []
    table = delta_name(storage.uri(path))
    assert batch(spark, f"SELECT * FROM table_changes('{storage.uri(path)}', 1)") == []
    for emit in ("changes", "records"):
        assert {r["_commit_version"] for r in batch(spark, ACCOUNTS_SQL.format(table, emit))} == {0}, emit
    assert multiset(batch(spark, ACCOUNTS_SQL.format(table, "final"))) == multiset(
        [{"id": 1, "balance": 5}, {"id": 2, "balance": 7}])


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 2), st.sampled_from(["insert", "delete", "update_postimage"]),
                               st.integers(0, 2), st.one_of(st.none(), st.integers(0, 1))), max_size=14))
def test_a_commits_rows_removed_and_added_unchanged_cancel_as_a_multiset_difference(rows):
    """Per commit, the rows deleted and inserted equal in every column cancel one for one (NULL
    equal to NULL); every other row stays, in its place."""
    import pyarrow as pa

    from sqlext.delta import unchanged_rows_cancelled

    table = pa.Table.from_pylist(
        [{"id": i, "v": v, "_change_type": kind, "_commit_version": version} for version, kind, i, v in rows],
        schema=pa.schema([("id", pa.int64()), ("v", pa.int64()), ("_change_type", pa.string()),
                          ("_commit_version", pa.int64())]))
    left = unchanged_rows_cancelled(table).to_pylist()
    counts, seen, expected = Counter(rows), Counter(), []
    for row in rows:  # a row's first occurrences cancel, as many as the other side has
        version, kind, i, v = row
        seen[row] += 1
        opposite = {"insert": "delete", "delete": "insert"}.get(kind)
        if opposite is None or seen[row] > counts[(version, opposite, i, v)]:
            expected.append(row)
    assert [(r["_commit_version"], r["_change_type"], r["id"], r["v"]) for r in left] == expected


def test_an_overwrite_reads_as_the_updates_inserts_and_deletes_it_makes(spark, root, storage):
    """An overwrite writes no change data files: its changes are every row of the old file as a
    delete and every row of the new one as an insert. The rows it kept cancel; a key it changed
    keeps a delete and an insert at one version, which read as the delete, then the insert (Delta's
    protocol orders a commit's removed rows before its added ones): one update. Batch and run by
    run alike."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = root / "accounts"
    _accounts(path, {1: 5, 2: 7, 4: 3})
    runs = Runs(spark, root, storage, sources={"accounts": storage.uri(path)})
    stream_sql = ACCOUNTS_SQL.format("STREAM(accounts)", "changes")
    runs.run(stream_sql)
    # 1 changes, 2 stays, 3 is new, 4 goes
    write_deltalake(str(path), pa.table({"id": [1, 2, 3], "balance": [6, 7, 1]}), mode="overwrite")
    assert _without_change_files(path, 1)
    expected = [{"id": 1, "balance": 5, "_change_type": "update_preimage", "_commit_version": 1},
                {"id": 1, "balance": 6, "_change_type": "update_postimage", "_commit_version": 1},
                {"id": 3, "balance": 1, "_change_type": "insert", "_commit_version": 1},
                {"id": 4, "balance": 3, "_change_type": "delete", "_commit_version": 1}]
    assert multiset(runs.run(stream_sql)) == multiset(expected)
    table = delta_name(storage.uri(path))
    assert multiset(r for r in batch(spark, ACCOUNTS_SQL.format(table, "changes")) if r["_commit_version"] == 1) \
        == multiset(expected)
    records = batch(spark, ACCOUNTS_SQL.format(table, "records"))
    assert sorted((r["id"], r["_change_type"]) for r in records if r["_commit_version"] == 1) == [
        (1, "upsert"), (3, "upsert"), (4, "delete")]  # one record for key 1's delete and insert
