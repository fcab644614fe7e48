"""Three change feeds (accounts, branches, regions) that chain: their random histories, as Delta's
change feed writes them, and a checkpoint over their folders run by run and compared with the
batch statement (the harness of the pipeline and rescale tests)."""

from __future__ import annotations

from hypothesis import strategies as st

import sqlext
from feeds import computed_on
from landing import land, read_rows
from rows import multiset
from sqlext.streaming import batch_form, run_available_now

SCHEMAS = {
    "acc": "id BIGINT, branch BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT",
    "br": "bid BIGINT, region BIGINT, bname STRING, _change_type STRING, _commit_version BIGINT",
    "reg": "rid BIGINT, rname STRING, _change_type STRING, _commit_version BIGINT",
}
KEYS = {"acc": "id", "br": "bid", "reg": "rid"}

FILTERED = "CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0')"
JOINED = ("FK_JOIN(left => TABLE(STREAM(acc)), right => TABLE(STREAM(br)), left_key => 'id', "
          "foreign_key => 'branch', right_key => 'bid', join_type => 'left')")
SHAPES = {
    "filter-then-join": ("SELECT * FROM FK_JOIN(left => TABLE(" + FILTERED + "), right => TABLE(STREAM(br)), "
                         "left_key => 'id', foreign_key => 'branch', right_key => 'bid', emit => '{emit}')"),
    "join-then-filter": ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(" + JOINED + "), key => 'id', "
                         "predicate => 'region IS NOT NULL AND balance > 2', emit => '{emit}')"),
    "join-then-join": ("SELECT * FROM FK_JOIN(left => TABLE(" + JOINED + "), right => TABLE(STREAM(reg)), "
                       "left_key => 'id', foreign_key => 'region', right_key => 'rid', join_type => 'left', "
                       "emit => '{emit}')"),
}
# one statement of each kind an incremental run keeps state for, over these feeds ({emit} to fill)
STATEMENTS = {
    "filter": "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0', "
              "emit => '{emit}')",
    "fk_join": "SELECT * FROM FK_JOIN(left => TABLE(STREAM(acc)), right => TABLE(STREAM(br)), left_key => 'id', "
               "foreign_key => 'branch', right_key => 'bid', join_type => 'left', emit => '{emit}')",
    "pipeline": SHAPES["join-then-filter"],
    "aggregate": "SELECT branch, count(*) AS n, sum(balance) AS total FROM FK_JOIN(left => TABLE(STREAM(acc)), "
                 "right => TABLE(STREAM(br)), left_key => 'id', foreign_key => 'branch', right_key => 'bid', "
                 "emit => 'final') GROUP BY branch",
}


def _values(table: str, draw_key: int, draw_value: int) -> dict:
    if table == "acc":
        return {"branch": draw_value % 3, "balance": draw_value - 2}
    if table == "br":
        return {"region": draw_value % 2, "bname": f"b{draw_value}"}
    return {"rname": f"r{draw_value}"}


@st.composite
def histories(draw):
    """Changes of the three tables, one a version, as Delta's change feed (an update is a
    preimage and a postimage at one version; a delete carries the deleted row)."""
    rows = {name: [] for name in SCHEMAS}
    current: dict = {}
    for version in range(1, draw(st.integers(2, 14)) + 1):
        table = draw(st.sampled_from(sorted(SCHEMAS)))
        key = draw(st.integers(0, 2))
        old = current.get((table, key))
        if old is not None and draw(st.integers(0, 4)) == 0:
            rows[table].append({**old, "_change_type": "delete", "_commit_version": version})
            del current[(table, key)]
            continue
        new = {KEYS[table]: key, **_values(table, key, draw(st.integers(0, 5)))}
        if old is None:
            rows[table].append({**new, "_change_type": "insert", "_commit_version": version})
        else:
            rows[table].append({**old, "_change_type": "update_preimage", "_commit_version": version})
            rows[table].append({**new, "_change_type": "update_postimage", "_commit_version": version})
        current[(table, key)] = new
    return rows, version


class Chain:
    """Three source folders, a checkpoint and an output, named in the form of ``storage``."""

    def __init__(self, spark, root, storage, path):
        self.spark, self.root, self.storage, self.path = spark, root, storage, path
        self.landed = {name: [] for name in SCHEMAS}
        for name, schema in SCHEMAS.items():  # every folder holds its columns from the start
            land(root / name, [], schema)

    def uri(self, name: str) -> str:
        return self.storage.uri(self.root / name)

    def land(self, rows: dict, after: int, upto: int) -> None:
        for name, table_rows in rows.items():
            chosen = [r for r in table_rows if after < r["_commit_version"] <= upto]
            if chosen:
                land(self.root / name, chosen, SCHEMAS[name])
                self.landed[name] += chosen

    def runs(self, rows: dict, last: int, cuts: list[int], sql: str):
        """Land the changes up to each cut (and the last version) and run once after each; yields
        the version each run reached."""
        done = 0
        for bound in sorted({min(c, last) for c in cuts} | {last}):
            self.land(rows, done, bound)
            self.run(sql)
            done = bound
            yield bound

    def run(self, sql: str):
        """One run over what has landed; the finished query."""
        with computed_on(self.spark, self.path):
            return run_available_now(self.spark, sql, checkpoint=self.uri("cp"), output=self.uri("out"),
                                     sources={name: self.uri(name) for name in SCHEMAS})

    def output(self):
        return multiset(read_rows(self.root / "out"))

    def batch(self, sql: str):
        views = []
        try:
            for name, rows in self.landed.items():
                self.spark.createDataFrame(rows, SCHEMAS[name]).createOrReplaceTempView(name)
                views.append(name)
            return multiset([r.asDict() for r in sqlext.sql(self.spark, batch_form(sql)).collect()])
        finally:
            for name in views:
                self.spark.catalog.dropTempView(name)
