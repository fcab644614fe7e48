"""Input shapes (``format => 'debezium' | 'iceberg'``): the event tables of CHANGELOG_FILTER
(KAFKA-3902's cases) and FK_JOIN (KIP-213's table), written in each shape from the same
fixtures, give the rows they give in Delta's shape, in a batch query and run by run; a
Debezium position that steps back across runs stops the run with nothing written; the errors
of each shape are classed; unusual column names work."""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from change_shapes import ORDER, ORDER_IN, SHAPES, as_delta, debezium_schema, in_shape, quoted
from feeds import cdf_rows, compact, computed_on
from landing import land, read_rows
from rows import added, multiset
from sqlext.functions.input_formats import change_rows
from sqlext.errors import SqlextError, find_in
from sqlext.language.dialect import to_sql
from sqlext.language.sqltree import table
from sqlext.streaming import batch_form, run_available_now
from kafka_3902 import CASES, KEYS_PER_CASE
from kip_213 import SEED_EVENTS, event_lists, feed

FILTER_DATA = [("id", "BIGINT"), ("name", "STRING"), ("v", "BIGINT"), ("ts", "BIGINT")]
LEFT_DATA = [("id", "STRING"), ("fk", "BIGINT"), ("note", "STRING")]
RIGHT_DATA = [("rid", "BIGINT"), ("name", "STRING")]
_names = itertools.count()


def _schema(data):
    return ", ".join(f"{quoted(n)} {k}" for n, k in data) + ", _change_type STRING, _commit_version BIGINT"


def _case_events():
    """Every case of KAFKA-3902's table on keys of its own, as one feed (as the case tests do)."""
    return [(version, number * KEYS_PER_CASE + key, *rest)
            for number, (events, *_) in enumerate(CASES.values()) for version, key, *rest in events]


_views: list[str] = []


def teardown_module():
    """Drop the views the module's tests made, on the session they made them in (if any)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    for name in _views if session is not None else ():
        session.catalog.dropTempView(name)


def _view(spark, rows, schema):
    from pyspark.sql.types import _parse_datatype_string

    name = f"shaped_{next(_names)}"
    spark.createDataFrame(rows, _parse_datatype_string(schema)).createOrReplaceTempView(name)
    _views.append(name)
    return name


def _data_error(spark, sql) -> SqlextError:
    """The sqlext error a query's data raises when its rows are read."""
    with pytest.raises(Exception) as caught:
        _rows(spark, sql)
    found = find_in(caught.value)
    assert found is not None, caught.value
    return found


def _rows(spark, sql):
    return [r.asDict() for r in sqlext.sql(spark, sql).collect()]


def filter_sql(source, emit="changes", extra=""):
    return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({source}), key => 'id', predicate => 'v >= 0', "
            f"emit => '{emit}'{extra})")


def join_sql(left, right, join_type, emit, extra=""):
    return (f"SELECT * FROM FK_JOIN(left => TABLE({left}), right => TABLE({right}), left_key => 'id', "
            f"foreign_key => 'fk', right_key => 'rid', join_type => '{join_type}', emit => '{emit}'{extra})")


# -- without Spark


def test_each_shape_maps_to_change_rows_named_for_its_order():
    fields = {"after": ["id", "v"], "before": ["id", "v"], "source": ["lsn", "txId", "db"]}.get
    rows = change_rows("F", "input", "debezium", table("t"), ["before", "after", "op", "ts_ms", "source"], fields, None)
    assert rows.columns == ("id", "v", "_change_type", "source_lsn") and rows.order_by == "source_lsn"
    sql = to_sql(rows.query)
    assert "WHERE NOT (__sx_env.`before` IS NULL AND __sx_env.`after` IS NULL AND __sx_env.`op` IS NULL)" in sql
    assert "'u' THEN 'update_postimage'" in sql
    # an update with its before row is a pre/post pair; a keyless reader marks one without it
    assert "THEN 'update_preimage'" in sql and "update without before" not in sql
    keyless = change_rows("F", "input", "debezium", table("t"), ["before", "after", "op", "source"], fields, None,
                          keyless=True)
    assert "'update without before'" in to_sql(keyless.query)
    iceberg = change_rows("F", "input", "iceberg", table("t"),
                          ["id", "v", "_change_type", "_change_ordinal", "_commit_snapshot_id"], fields, None)
    assert iceberg.columns == ("id", "v", "_change_ordinal", "_change_type")
    assert "_commit_snapshot_id" not in to_sql(iceberg.query)
    assert change_rows("F", "input", "delta", table("t"), ["id"], fields, None) is None


@pytest.mark.parametrize("columns, fields, order_by, error", [
    # MySQL: no lsn, so no default order; the message names the candidates
    (["before", "after", "op", "ts_ms", "source"], {"after": ["id"], "source": ["file", "pos", "row", "db"]}, None,
     r"\[ORDER_BY_REQUIRED\].*'source.file', 'source.pos', 'source.row', 'ts_ms'"),
    (["before", "after", "op", "source"], {"after": ["id", "source_lsn"], "source": ["lsn"]}, None,
     r"\[ORDER_COLUMN_CLASH\].*source.lsn.*source_lsn"),
    (["before", "after", "op", "source"], {"after": ["id"], "source": ["lsn"]}, "source.nope",
     r"\[CHANGELOG_MISSING_COLUMN\].*'nope'"),
    (["before", "after", "source"], {"after": ["id"], "source": ["lsn"]}, None, r"\[CHANGELOG_MISSING_COLUMN\].*'op'"),
    (["before", "after", "op", "source"], {"source": ["lsn"]}, None, r"\[INVALID_ARGUMENT_TYPE\].*no struct"),
])
def test_debezium_inputs_sqlext_cannot_order_or_read_are_classed_errors(columns, fields, order_by, error):
    with pytest.raises(SqlextError, match=error):
        change_rows("FK_JOIN", "left", "debezium", table("t"), columns, fields.get, order_by)


def test_an_iceberg_snapshot_id_is_no_order():
    with pytest.raises(SqlextError, match=r"\[INVALID_ARGUMENT_TYPE\].*_commit_snapshot_id.*_change_ordinal"):
        change_rows("F", "input", "iceberg", table("t"), ["id", "_change_type", "_change_ordinal",
                                                          "_commit_snapshot_id"], {}.get, "_commit_snapshot_id")


def test_without_spark_an_envelope_of_unknown_fields_is_left_to_spark_and_iceberg_expands():
    from sqlext.rewrites.changelog_filter import changelog_filter_to_sql
    from sqlext.language.dialect import parse_one
    from sqlext.analysis.relations import MappingRelations

    relations = MappingRelations({"env": ["before", "after", "op", "source"],
                                  "ice": ["id", "v", "_change_type", "_change_ordinal", "_commit_snapshot_id"]})
    debezium = changelog_filter_to_sql(parse_one(filter_sql("env", extra=", format => 'debezium'")),
                                       relations=relations)
    assert "CHANGELOG_FILTER(" in to_sql(debezium)
    iceberg = to_sql(changelog_filter_to_sql(parse_one(filter_sql("ice", extra=", format => 'iceberg'")),
                                             relations=relations))
    assert "CHANGELOG_FILTER(" not in iceberg and "'UPDATE_AFTER' THEN 'update_postimage'" in iceberg


def test_an_unknown_format_lists_the_known_ones():
    with pytest.raises(SqlextError, match=r"\[INVALID_OPTION_VALUE\] CHANGELOG_FILTER: format => 'avro'.*"
                                          r"'delta', 'debezium', 'iceberg'"):
        sqlext.rewrite(filter_sql("t", extra=", format => 'avro'"))


def test_the_batch_form_gives_the_streams_shape_to_the_call_where_all_its_inputs_share_it():
    """The batch form reads each ``STREAM(x)`` as ``x``: its format and order_by go to the call
    where every table input of the call is a stream with the same ones (the call's own win);
    elsewhere the source is read as it is."""
    name = "`it's {a b}``c`"
    both = join_sql(f"STREAM({name}, format => 'debezium', order_by => 'source.`t x`')",
                    "STREAM(c, format => 'debezium', order_by => 'source.`t x`')", "inner", "changes")
    assert batch_form(both).endswith(f"left => TABLE({name}), right => TABLE(c), left_key => 'id', foreign_key => "
                                     "'fk', right_key => 'rid', join_type => 'inner', emit => 'changes', format => "
                                     "'debezium', order_by => 'source.`t x`')")
    own = filter_sql("STREAM(c, format => 'iceberg', order_by => 'o')", extra=", order_by => 'p'")
    assert batch_form(own).endswith("TABLE(c), key => 'id', predicate => 'v >= 0', emit => 'changes', "
                                    "order_by => 'p', format => 'iceberg')")
    for untouched in (join_sql("STREAM(a, format => 'debezium')", "STREAM(c)", "inner", "changes"),
                      join_sql("STREAM(a, format => 'debezium')", "STREAM(c, format => 'iceberg')", "inner", "changes"),
                      "SELECT * FROM STREAM(a, format => 'debezium') AS s"):
        assert "format" not in batch_form(untouched) and "STREAM" not in batch_form(untouched)


# -- batch


@pytest.fixture(scope="module")
def filter_cases(spark):
    """The case feed's Delta change rows and each emit mode's output over them."""
    rows = cdf_rows(_case_events())
    delta = _view(spark, rows, _schema(FILTER_DATA))
    return rows, {emit: _rows(spark, filter_sql(delta, emit)) for emit in ("changes", "records", "final")}


@pytest.mark.parametrize("shape", SHAPES)
def test_kafka_3902_cases_give_the_delta_rows_in_each_shape(spark, filter_cases, shape):
    rows, expected = filter_cases
    shaped, schema = in_shape(shape, rows, FILTER_DATA)
    source = _view(spark, [r for _, r in shaped], schema)
    for emit, want in expected.items():
        got = _rows(spark, filter_sql(source, emit, f", format => '{shape}'"))
        if emit != "final":
            assert {ORDER_IN[shape], "_change_type"} <= set(got[0])
        assert multiset(as_delta(got, shape)) == multiset(want), emit


@pytest.fixture(scope="module")
def seed_feeds():
    left = feed([(v, k, r) for v, side, k, r in SEED_EVENTS if side == "left"], "cdf", "id")
    right = feed([(v, k, r) for v, side, k, r in SEED_EVENTS if side == "right"], "cdf", "rid")
    return left, right


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("join_type, emit", [("inner", "records"), ("left", "changes"), ("inner", "final")])
def test_kip_213_event_table_gives_the_delta_rows_in_each_shape(spark, seed_feeds, shape, join_type, emit):
    left, right = seed_feeds
    want = _rows(spark, join_sql(_view(spark, left, _schema(LEFT_DATA)), _view(spark, right, _schema(RIGHT_DATA)),
                                 join_type, emit))
    assert want  # the table forwards rows in every mode tried
    views = []
    for rows, data in ((left, LEFT_DATA), (right, RIGHT_DATA)):
        shaped, schema = in_shape(shape, rows, data)
        views.append(_view(spark, [r for _, r in shaped], schema))
    got = _rows(spark, join_sql(*views, join_type, emit, f", format => '{shape}'"))
    assert multiset(as_delta(got, shape)) == multiset(want)


@settings(max_examples=examples(4, 40), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=event_lists, shape=st.sampled_from(SHAPES), join_type=st.sampled_from(["inner", "left"]),
       emit=st.sampled_from(["changes", "records", "final"]))
def test_random_histories_give_the_delta_rows_in_each_shape(spark, events, shape, join_type, emit):
    """FK_JOIN over random left and right histories (foreign keys that move, right rows that
    change under their subscribers, deletes of absent keys), written in each shape."""
    sides = [(feed([(v, k, r) for v, side, k, r in events if side == name], "cdf", key), data)
             for name, key, data in (("left", "id", LEFT_DATA), ("right", "rid", RIGHT_DATA))]
    want = _rows(spark, join_sql(*[_view(spark, rows, _schema(data)) for rows, data in sides], join_type, emit))
    views = []
    for rows, data in sides:
        shaped, schema = in_shape(shape, rows, data)
        views.append(_view(spark, [r for _, r in shaped], schema))
    got = _rows(spark, join_sql(*views, join_type, emit, f", format => '{shape}'"))
    assert multiset(as_delta(got, shape)) == multiset(want)


def test_debezium_ties_truncates_and_records_that_are_no_events_are_refused(spark):
    schema = debezium_schema([("id", "BIGINT"), ("v", "BIGINT")])
    src = {"lsn": 7, "txId": 1, "db": "d", "table": "t"}
    tie = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "c", "source": src},
                        {"before": {"id": 1, "v": 1}, "after": {"id": 1, "v": 2}, "op": "u", "source": src}], schema)
    assert re.search(r"\[AMBIGUOUS_ORDER\].*id=1.*source_lsn = 7",
                     str(_data_error(spark, filter_sql(tie, extra=", format => 'debezium'"))))
    # a truncate names the op field and what it means for the table, not _change_type
    truncate = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "c", "source": src},
                             {"op": "t", "source": {**src, "lsn": 8}}], schema)
    error = _data_error(spark, filter_sql(truncate, extra=", format => 'debezium'"))
    assert error.error_class == "NOT_A_CHANGE_EVENT" and "truncate (op = 't')" in str(error)
    assert "empties the table" in str(error) and "_change_type" not in str(error)
    unknown = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "m", "source": src}], schema)
    assert "has op = 'm', which is no operation Debezium writes" in \
        str(_data_error(spark, filter_sql(unknown, extra=", format => 'debezium'")))
    # in batch too: a row without op that is no tombstone (a plain row among the events) is refused,
    # a record whose value is null (a tombstone) is left out
    plain = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "c", "source": src}, {}, {"id": 2, "v": 3}],
                  schema + ", id BIGINT, v BIGINT")
    error = _data_error(spark, filter_sql(plain, extra=", format => 'debezium'"))
    assert error.error_class == "NOT_A_CHANGE_EVENT" and "has no op and is no tombstone" in str(error)
    assert '{"id":2,"v":3}' in str(error)
    tombstones = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "c", "source": src}, {}, {"source": src}], schema)
    assert [(r["id"], r["_change_type"]) for r in _rows(spark, filter_sql(tombstones, extra=", format => "
                                                                         "'debezium'"))] == [(1, "insert")]


def test_a_mysql_envelope_orders_by_a_named_field(spark):
    schema = ("before STRUCT<id: BIGINT, v: BIGINT>, after STRUCT<id: BIGINT, v: BIGINT>, op STRING, ts_ms BIGINT, "
              "source STRUCT<file: STRING, pos: BIGINT, `row`: INT, db: STRING>")
    rows = [{"after": {"id": 1, "v": 5}, "op": "c", "ts_ms": 1, "source": {"file": "b.1", "pos": 10, "row": 0}},
            {"before": {"id": 1, "v": 5}, "after": {"id": 1, "v": 6}, "op": "u", "ts_ms": 1,
             "source": {"file": "b.1", "pos": 20, "row": 0}}]
    source = _view(spark, rows, schema)
    with pytest.raises(SqlextError, match=r"\[ORDER_BY_REQUIRED\].*'source.pos'"):
        _rows(spark, filter_sql(source, extra=", format => 'debezium'"))
    got = _rows(spark, filter_sql(source, extra=", format => 'debezium', order_by => 'source.pos'"))
    assert sorted((r["_change_type"], r["v"], r["source_pos"]) for r in got) == [
        ("insert", 5, 10), ("update_postimage", 6, 20), ("update_preimage", 5, 20)]


AWKWARD = ["it's", "back`tick", "{braces}", "a space"]


@pytest.mark.parametrize("shape", SHAPES)
def test_column_names_with_quotes_backticks_braces_and_spaces(spark, shape):
    key, value, name, other = AWKWARD
    data = [(key, "BIGINT"), (value, "BIGINT"), (name, "STRING"), (other, "STRING")]
    events = [(1, 1, 5), (2, 1, 7), (2, 2, -1), (3, 2, 4), (4, 1, None)]
    rows = [{key: r["id"], value: r["v"], name: r["name"], other: "x y", "_change_type": r["_change_type"],
             ORDER: r[ORDER]} for r in cdf_rows(events)]
    q = quoted(key)
    predicate = f"{quoted(value)} >= 0".replace("'", "''")
    sql = (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({{}}), key => '{q.replace(chr(39), chr(39) * 2)}', "
           f"predicate => '{predicate}'{{}})")
    want = _rows(spark, sql.format(_view(spark, rows, _schema(data)), ""))
    shaped, schema = in_shape(shape, rows, data)
    got = _rows(spark, sql.format(_view(spark, [r for _, r in shaped], schema), f", format => '{shape}'"))
    assert len(want) == 5 and multiset(as_delta(got, shape)) == multiset(want)


# -- run by run


class ShapedFeeds:
    """Folders of change files in one shape, released a version at a time, with the runs'
    checkpoint and output."""

    def __init__(self, spark, root: Path, storage, tables: dict):
        from pyspark.sql.types import _parse_datatype_string

        self.spark, self.root, self.storage = spark, root, storage
        self.tables = {name: (rows, _parse_datatype_string(schema)) for name, (rows, schema) in tables.items()}
        self.seen: list[dict] = []
        for name, (_, schema) in self.tables.items():
            land(root / name, [], schema)

    def uri(self, path: Path) -> str:
        return self.storage.uri(path)

    def release(self, after, upto, rows=None) -> None:
        for name, (shaped, schema) in self.tables.items():
            chosen = [r for version, r in (rows or {}).get(name, shaped) if after < version <= upto]
            if chosen:
                land(self.root / name, chosen, schema)

    def output(self) -> list[dict]:
        return read_rows(self.root / "out")

    def run(self, sql: str, path: str = "auto") -> list[dict]:
        """One incremental run; the rows it added to the output."""
        with computed_on(self.spark, path):
            run_available_now(self.spark, sql, checkpoint=self.uri(self.root / "checkpoint"),
                              output=self.uri(self.root / "out"),
                              sources={name: self.uri(self.root / name) for name in self.tables})
        rows = self.output()
        new, self.seen = added(rows, self.seen), rows
        return new


@pytest.fixture
def shaped_feeds(spark, storage):
    roots = []

    def make(tables):
        roots.append(Path(tempfile.mkdtemp(prefix="sqlext-shapes-")))
        return ShapedFeeds(spark, roots[-1], storage, tables)

    yield make
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("shape, path", [("debezium", "driver"), ("iceberg", "spark")])
def test_kafka_3902_cases_run_by_run_in_each_shape(filter_cases, shaped_feeds, shape, path):
    """One version per run: each run forwards the Delta shape's batch rows of its version,
    on the driver or on the executors."""
    rows, expected = filter_cases
    current = shaped_feeds({"changes": in_shape(shape, rows, FILTER_DATA)})
    for version in sorted({r[ORDER] for r in rows}):
        current.release(version - 1, version)
        got = as_delta(current.run(filter_sql("STREAM(changes)", extra=f", format => '{shape}'"), path), shape)
        assert sorted(compact(got, "changes")) == \
            sorted(compact([r for r in expected["changes"] if r[ORDER] == version], "changes")), version


@pytest.mark.parametrize("shape, join_type, emit", [("debezium", "inner", "records"), ("iceberg", "left", "changes")])
def test_kip_213_event_table_run_by_run_in_each_shape(spark, seed_feeds, shaped_feeds, shape, join_type, emit):
    left, right = seed_feeds
    want = _rows(spark, join_sql(_view(spark, left, _schema(LEFT_DATA)), _view(spark, right, _schema(RIGHT_DATA)),
                                 join_type, emit))
    current = shaped_feeds({"orders": in_shape(shape, left, LEFT_DATA), "customers": in_shape(shape, right, RIGHT_DATA)})
    sql = join_sql("STREAM(orders)", "STREAM(customers)", join_type, emit, f", format => '{shape}'")
    for version, *_ in SEED_EVENTS:
        current.release(version - 1, version)
        got = as_delta(current.run(sql), shape)
        assert multiset(got) == multiset(r for r in want if r[ORDER] == version), version


def test_a_debezium_position_that_steps_back_across_runs_writes_nothing(spark, shaped_feeds):
    """Postgres LSNs are not monotone per record: a change of a key at or below the position an
    earlier run applied for it is refused, naming the key and both positions."""
    rows = cdf_rows([(10, 1, 5), (20, 1, 7), (20, 2, 3)])
    current = shaped_feeds({"changes": in_shape("debezium", rows, FILTER_DATA)})
    sql = filter_sql("STREAM(changes)", extra=", format => 'debezium'")
    current.release(0, 20)
    assert len(current.run(sql)) == 4
    back = cdf_rows([(15, 1, 9)])  # key 1 at LSN 15, after the run that applied LSN 20
    current.release(0, 15, {"changes": in_shape("debezium", [{**r, "_change_type": "update_postimage"}
                                                            for r in back], FILTER_DATA)[0]})
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*id=1.*source_lsn = 15.*not above 20"):
        current.run(sql)
    assert len(current.output()) == 4


def test_the_cli_streams_debezium_json_files(spark, tmp_path, capsys, storage):
    """``sqlext stream`` over a folder of Debezium JSON files (as a topic's sink writes them; the
    columns are inferred from the files): the runs give the Delta shape's rows, and an LSN that
    steps back is refused with nothing written."""
    from pyspark.sql.types import _parse_datatype_string

    from sqlext.cli import main

    schema = in_shape("debezium", [], FILTER_DATA)[1]
    source, out = tmp_path / "topic", tmp_path / "out"

    def add(events, kind=None):
        rows = [{**r, "_change_type": kind or r["_change_type"]} for r in cdf_rows(events)]
        shaped = [r for _, r in in_shape("debezium", rows, FILTER_DATA)[0]]
        spark.createDataFrame(shaped, _parse_datatype_string(schema)).coalesce(1).write.mode("append") \
            .json(storage.uri(source))

    query = tmp_path / "filter.sql"
    query.write_text(filter_sql("STREAM(topic)", extra=", format => 'debezium'") + ";\n")
    argv = ["stream", str(query), "--checkpoint", storage.uri(tmp_path / "checkpoint"), "--output", storage.uri(out),
            "--source", f"topic={storage.uri(source)}", "--source-format", "topic=json"]  # the topic's format
    add([(100, 1, 5), (100, 2, -3), (200, 1, None)])  # a delete, and its tombstone
    assert main(argv) == 0, capsys.readouterr().err
    rows = [r.asDict() for r in spark.read.parquet(storage.uri(out)).collect()]
    assert sorted(compact(as_delta(rows, "debezium"), "changes")) == [("delete", 5, 200), ("insert", 5, 100)]
    add([(150, 2, 4)], kind="update_postimage")  # key 2 at LSN 150, after LSN 100 was applied: in order
    add([(90, 1, 8)])  # key 1 at LSN 90, below the 200 applied to it
    assert main(argv) == 1
    assert re.search(r"\[LATE_CHANGE\].*id=1.*source_lsn = 90.*not above 200", capsys.readouterr().err)
    assert spark.read.parquet(storage.uri(out)).count() == 2


def test_a_debezium_source_table_feeds_an_incremental_model_whose_deletes_reach_it(spark, tmp_path, storage):
    """What dbt's incremental model over a Debezium source runs (``run_into_table``): each run
    reads the events that landed since the last one, and a delete removes the row from the
    model's table (emit => 'final'), as the batch result over every event says."""
    from sqlext.streaming import run_into_table

    schema = debezium_schema([("id", "BIGINT"), ("name", "STRING"), ("tier", "STRING")])
    location = storage.uri(tmp_path / "db").replace("'", "\\'")
    spark.sql(f"CREATE DATABASE sx_cdc LOCATION '{location}'")
    try:
        spark.sql(f"CREATE TABLE sx_cdc.customers_cdc ({schema}) USING parquet")
        model = ("SELECT id, name FROM CHANGELOG_FILTER(input => TABLE(STREAM(sx_cdc.customers_cdc)), key => 'id', "
                 "predicate => \"tier = 'gold'\", emit => 'final', format => 'debezium')")
        landings = [[(1, 1, "Ada", "gold"), (1, 2, "Bo", "gold"), (1, 3, "Cy", "silver")],
                    [(2, 2, None, None), (3, 3, "Cy", "gold")],  # Bo's account is deleted; Cy turns gold
                    [(4, 1, None, None)]]
        history = []
        for landing in landings:
            history += [(version, key, {"name": name, "tier": tier} if name else None)
                        for version, key, name, tier in landing]
            # the events of this landing, with their before rows taken from the whole history
            rows = [r for r in feed(history, "cdf", "id") if r[ORDER] >= landing[0][0]]
            spark.createDataFrame([r for _, r in in_shape("debezium", rows, [("id", "BIGINT"), ("name", "STRING"),
                                                                             ("tier", "STRING")])[0]],
                                  schema).coalesce(1).write.insertInto("sx_cdc.customers_cdc")
            run_into_table(spark, model, "sx_cdc.gold_customers")
            got = sorted(tuple(r) for r in spark.table("sx_cdc.gold_customers").collect())
            want = sorted(tuple(r) for r in sqlext.sql(spark, model.replace("STREAM(sx_cdc.customers_cdc)",
                                                                           "sx_cdc.customers_cdc")).collect())
            assert got == want
        assert got == [(3, "Cy")]  # Ada's and Bo's deletes reached the model's table
    finally:
        spark.sql("DROP DATABASE sx_cdc CASCADE")


def test_a_nested_ordering_column_with_an_awkward_name(spark):
    """order_by names a field by its path, each part quoted with backticks; the change rows name
    it by the path with underscores."""
    field = "l`s n{x}'"
    schema = ("before STRUCT<id: BIGINT, v: BIGINT>, after STRUCT<id: BIGINT, v: BIGINT>, op STRING, "
              f"source STRUCT<{quoted(field)}: BIGINT>")
    source = _view(spark, [{"after": {"id": 1, "v": 5}, "op": "c", "source": {field: 3}},
                           {"before": {"id": 1, "v": 5}, "op": "d", "source": {field: 4}}], schema)
    path = f"source.{quoted(field)}".replace("'", "''")
    got = _rows(spark, filter_sql(source, extra=f", format => 'debezium', order_by => '{path}'"))
    assert sorted((r["_change_type"], r["source_" + field]) for r in got) == [("delete", 4), ("insert", 3)]


def test_fk_join_refuses_a_debezium_position_below_what_either_input_reached(spark, shaped_feeds):
    """FK_JOIN keeps one order across both inputs: a right event whose LSN is below a left
    event an earlier run applied (transactions that interleave in Postgres's log) is refused."""
    left = feed([(20, "k", {"fk": 1, "note": "n"})], "cdf", "id")
    right = feed([(10, 1, {"name": "foo"})], "cdf", "rid")
    current = shaped_feeds({"orders": in_shape("debezium", left, LEFT_DATA),
                            "customers": in_shape("debezium", right, RIGHT_DATA)})
    sql = join_sql("STREAM(orders)", "STREAM(customers)", "inner", "changes", ", format => 'debezium'")
    current.release(0, 20)
    assert [(r["id"], r["name"], r["source_lsn"]) for r in current.run(sql)] == [("k", "foo", 20)]
    late = feed([(15, 2, {"name": "bar"})], "cdf", "rid")
    current.release(0, 15, {"orders": [], "customers": in_shape("debezium", late, RIGHT_DATA)[0]})
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*rid=2.*source_lsn = 15.*not above 20.*both inputs"):
        current.run(sql)
    assert len(current.output()) == 1


def test_events_a_restarted_connector_sends_again_are_one_change(spark, shaped_feeds):
    """Debezium delivers at least once: a connector that restarts sends the events since its
    last recorded position again, each at its position with its content. Such a copy is the
    change it repeats, in one input as in a later run (where the state holds its key's last
    applied change to compare it with); the same position with other content is refused. (On
    the executors; the driver runs the same kernel, as the filter's test below does.)"""
    path = "spark"
    left = feed([(20, "k", {"fk": 1, "note": "n"}), (30, "k", {"fk": 1, "note": "m"})], "cdf", "id")
    right = feed([(10, 1, {"name": "foo"})], "cdf", "rid")
    orders, customers = in_shape("debezium", left, LEFT_DATA), in_shape("debezium", right, RIGHT_DATA)
    sql = join_sql("STREAM(orders)", "STREAM(customers)", "inner", "changes", ", format => 'debezium'")

    def batch(shaped_orders, shaped_customers):
        views = [_view(spark, [r for _, r in rows], schema) for rows, schema in
                 ((shaped_orders, orders[1]), (shaped_customers, customers[1]))]
        return multiset(_rows(spark, join_sql(*views, "inner", "changes", ", format => 'debezium'")))

    once = batch(orders[0], customers[0])
    assert batch(orders[0] * 2, customers[0] * 2) == once
    current = shaped_feeds({"orders": orders, "customers": customers})
    current.release(0, 20, {"orders": orders[0] * 2, "customers": customers[0] * 2})  # twice in one run
    got = current.run(sql, path)
    current.release(0, 20)  # and again in a later run: the keys' last applied changes
    got += current.run(sql, path)
    current.release(20, 30)
    got += current.run(sql, path)
    assert multiset(got) == once
    # at a key's applied position, other content is two changes at one position
    other = [(v, {**r, "after": {**r["after"], "note": "x"}}) for v, r in orders[0] if v == 30]
    current.release(20, 30, {"orders": other, "customers": []})
    with pytest.raises(SqlextError, match=r"\[AMBIGUOUS_ORDER\].*id='k'.*source_lsn = 30"):
        current.run(sql, path)
    max((current.root / "orders").glob("*.parquet"), key=lambda f: f.stat().st_mtime_ns).unlink()  # moved out
    # a copy of a change older than its key's last: the state keeps the last alone, so it is late
    current.release(0, 20, {"orders": orders[0], "customers": []})
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*id='k'.*source_lsn = 20"):
        current.run(sql, path)
    assert multiset(current.output()) == once


def test_a_filter_reads_a_debezium_event_sent_again_once(spark, tmp_path):
    events = ['{"before": null, "after": {"id": 1, "name": "a", "v": 5, "ts": 1}, "op": "c", "source": {"lsn": 100}}',
              '{"before": {"id": 1, "name": "a", "v": 5, "ts": 1}, "after": {"id": 1, "name": "b", "v": 6, "ts": 2}, '
              '"op": "u", "ts_ms": 7, "source": {"lsn": 110}}']
    again = events[1].replace('"ts_ms": 7', '"ts_ms": 9')  # sent again later: ts_ms is the connector's clock
    topic = tmp_path / "topic"
    topic.mkdir()
    (topic / "part-1.json").write_text("\n".join(events + events) + "\n")
    options = dict(sources={"changes": str(topic)}, source_format="json", checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"))
    sql = filter_sql("STREAM(changes, format => 'debezium')")
    run_available_now(spark, sql, **options)
    (topic / "part-2.json").write_text(again + "\n")
    run_available_now(spark, sql, **options)
    got = sorted((r.v, r._change_type, r.source_lsn) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == [(5, "insert", 100), (5, "update_preimage", 110), (6, "update_postimage", 110)]
    batch = spark.read.json(str(topic))
    batch.createOrReplaceTempView("resent_topic")
    assert sorted((r.v, r._change_type, r.source_lsn) for r in
                  _rows_of(spark, filter_sql("resent_topic", extra=", format => 'debezium'"))) == got


def _rows_of(spark, sql):
    return sqlext.sql(spark, sql).collect()


def test_the_registered_table_function_refuses_a_shape_it_cannot_map(spark):
    """Plain spark.sql runs the registered CHANGELOG_FILTER, which reads its input as it is."""
    schema = debezium_schema([("id", "BIGINT"), ("v", "BIGINT")])
    source = _view(spark, [{"after": {"id": 1, "v": 1}, "op": "c", "source": {"lsn": 1}}], schema)
    with pytest.raises(Exception) as caught:
        spark.sql(filter_sql(source, extra=", format => 'debezium'")).collect()
    assert find_in(caught.value).error_class == "UNSUPPORTED_STATEMENT"


def test_format_is_for_the_call_that_reads_the_shape_not_for_one_over_its_output(spark, shaped_feeds):
    left = feed([(20, "k", {"fk": 1, "note": "n"})], "cdf", "id")
    right = feed([(10, 1, {"name": "foo"})], "cdf", "rid")
    current = shaped_feeds({"orders": in_shape("debezium", left, LEFT_DATA),
                            "customers": in_shape("debezium", right, RIGHT_DATA)})
    inner = ("CHANGELOG_FILTER(input => TABLE({}), key => 'id', predicate => 'fk > 0', "
             "format => 'debezium')")
    sql = join_sql(inner, "{}", "inner", "changes", ", format => 'debezium'")
    current.release(0, 20)
    with pytest.raises(SqlextError, match=r"\[INVALID_ARGUMENT_TYPE\] FK_JOIN: format must be 'delta' where the "
                                          r"left input is another call's change rows; got 'debezium'"):
        current.run(sql.format("STREAM(orders)", "STREAM(customers)"))
    views = [_view(spark, [r for _, r in in_shape("debezium", rows, data)[0]], in_shape("debezium", [], data)[1])
             for rows, data in ((left, LEFT_DATA), (right, RIGHT_DATA))]
    with pytest.raises(SqlextError, match=r"\[CHANGELOG_MISSING_COLUMN\] FK_JOIN: left has no column 'before'"):
        sqlext.sql(spark, sql.format(*views))


# -- the shape on the stream: TABLE(STREAM(x, format => ...)) in the call


def _stream(name, shape, extra=""):
    return f"STREAM({name}, format => '{shape}'{extra})"


def _batch_of(spark, current, sql):
    """The rows of ``sql``'s batch form over everything landed so far in ``current``'s folders
    (each read as a view of the source's name)."""
    for name in current.tables:
        spark.read.parquet(current.uri(current.root / name)).createOrReplaceTempView(name)
    try:
        return _rows(spark, batch_form(sql))
    finally:
        for name in current.tables:
            spark.catalog.dropTempView(name)


@pytest.mark.parametrize("shape, path", [("debezium", "spark"), ("iceberg", "driver")])
def test_kafka_3902_cases_run_by_run_with_the_shape_on_the_stream(spark, filter_cases, shaped_feeds, shape, path):
    """``input => TABLE(STREAM(changes, format => ...))`` and no format on the call: the call
    orders by the shape's ordering column, each run forwards the Delta shape's rows of its
    version, and the runs add up to the batch form (which gives the call the format)."""
    rows, expected = filter_cases
    current = shaped_feeds({"changes": in_shape(shape, rows, FILTER_DATA)})
    sql = filter_sql(_stream("changes", shape))
    written = []
    for version in sorted({r[ORDER] for r in rows}):
        current.release(version - 1, version)
        got = current.run(sql, path)
        assert got and all(ORDER_IN[shape] in r for r in got)
        assert sorted(compact(as_delta(got, shape), "changes")) == \
            sorted(compact([r for r in expected["changes"] if r[ORDER] == version], "changes")), version
        written += got
    assert "TABLE(changes), key => 'id'" in batch_form(sql) and batch_form(sql).endswith(f", format => '{shape}')")
    assert multiset(written) == multiset(_batch_of(spark, current, sql))


@pytest.mark.parametrize("shape, join_type, emit", [("debezium", "left", "changes"), ("iceberg", "inner", "records")])
def test_kip_213_event_table_run_by_run_with_the_shape_on_the_streams(spark, seed_feeds, shaped_feeds, shape, join_type,
                                                                     emit):
    left, right = seed_feeds
    want = _rows(spark, join_sql(_view(spark, left, _schema(LEFT_DATA)), _view(spark, right, _schema(RIGHT_DATA)),
                                 join_type, emit))
    current = shaped_feeds({"orders": in_shape(shape, left, LEFT_DATA), "customers": in_shape(shape, right, RIGHT_DATA)})
    sql = join_sql(_stream("orders", shape), _stream("customers", shape), join_type, emit)
    written = []
    for version, *_ in SEED_EVENTS:
        current.release(version - 1, version)
        got = current.run(sql)
        assert multiset(as_delta(got, shape)) == multiset(r for r in want if r[ORDER] == version), version
        written += got
    assert multiset(written) == multiset(_batch_of(spark, current, sql))


def test_a_pipeline_over_debezium_streams_orders_each_call_by_the_lsn(spark, seed_feeds, shaped_feeds):
    """An FK_JOIN whose left input is a CHANGELOG_FILTER over one Debezium stream and whose
    right input is another: a format on the calls could not say it (the outer call's left
    input is change rows), on the streams it can; each run gives the Delta pipeline's rows."""
    left, right = seed_feeds
    inner = ("CHANGELOG_FILTER(input => TABLE({}), key => 'id', predicate => 'fk < 10')")
    pipeline = join_sql(inner, "{}", "left", "changes")
    views = [_view(spark, left, _schema(LEFT_DATA)), _view(spark, right, _schema(RIGHT_DATA))]
    want = _rows(spark, pipeline.format(*views))
    assert want and not any(r["fk"] == 10 for r in want)  # the filter holds back the order of fk 10
    current = shaped_feeds({"orders": in_shape("debezium", left, LEFT_DATA),
                            "customers": in_shape("debezium", right, RIGHT_DATA)})
    sql = pipeline.format(_stream("orders", "debezium"), _stream("customers", "debezium"))
    for version, *_ in SEED_EVENTS:
        current.release(version - 1, version)
        assert multiset(as_delta(current.run(sql), "debezium")) == \
            multiset(r for r in want if r[ORDER] == version), version


def test_the_stream_and_the_call_give_one_format_or_agree(spark, seed_feeds, shaped_feeds):
    """A format on both the call and a STREAM it reads: the same one runs as either alone; two
    different ones, or inputs whose ordering columns are named differently with no order_by,
    are classed errors naming both, before anything runs."""
    left, right = seed_feeds
    current = shaped_feeds({"orders": in_shape("debezium", left, LEFT_DATA),
                            "customers": in_shape("debezium", right, RIGHT_DATA)})
    current.release(0, 2)
    clash = join_sql(_stream("orders", "iceberg"), "STREAM(customers)", "inner", "changes", ", format => 'debezium'")
    with pytest.raises(SqlextError, match=r"\[INVALID_ARGUMENT_TYPE\] FK_JOIN: format must be the format the left "
                                          r"input's STREAM\(\.\.\.\) gives.*got 'debezium', and STREAM\(orders, "
                                          r"format => 'iceberg'\) gives 'iceberg'"):
        current.run(clash)
    mixed = join_sql(_stream("orders", "debezium"), "STREAM(customers)", "inner", "changes")
    with pytest.raises(SqlextError, match=r"\[INVALID_ARGUMENT_TYPE\] FK_JOIN: order_by must be given.*source_lsn "
                                          r"\(left: STREAM\(orders, format => 'debezium'\)\), _commit_version "
                                          r"\(right: STREAM\(customers\)\)"):
        current.run(mixed)
    assert current.output() == []
    agree = join_sql(_stream("orders", "debezium"), "STREAM(customers)", "inner", "changes", ", format => 'debezium'")
    assert [(r["id"], r["name"], r["source_lsn"]) for r in current.run(agree)] == [("k", "foo", 2)]


def test_the_stream_s_order_by_orders_the_call(spark, shaped_feeds):
    """``STREAM(x, format => 'debezium', order_by => 'source.txId')``: the call orders by that
    field (``source_txId``), the default it has with the format and order_by on the call."""
    rows = cdf_rows([(1, 1, 5), (2, 1, 7), (3, 2, 4)])
    current = shaped_feeds({"changes": in_shape("debezium", rows, FILTER_DATA)})
    current.release(0, 3)
    got = current.run(filter_sql(_stream("changes", "debezium", ", order_by => 'source.txId'")))
    assert sorted((r["_change_type"], r["v"], r["source_txId"]) for r in got) == [
        ("insert", 4, 503), ("insert", 5, 501), ("update_postimage", 7, 502), ("update_preimage", 5, 502)]
