"""Random change files with one thing wrong, run by run: JSON, CSV and Parquet, read by a
CHANGELOG_FILTER, as the left input of an FK_JOIN, or by a filter feeding an FK_JOIN; and JSON
files of Debezium's events (with Kafka's tombstones as ``null`` lines) read by a filter.

Strict (the default): the run that meets the bad file stops with a classed error naming the file,
the output and the state are byte for byte as before it, and once the file is corrected (in
place, or replaced by a file of another name) the runs' outputs add up to the batch statement
over the corrected feed. Tolerant (a quarantine): the outputs add up to the batch statement over
the records that could be read, and each bad record is in the quarantine once, also when the
batch that met it is redone after losing its commit."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from change_shapes import debezium_rows
from landing import read_rows
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now

COLUMNS = ("id", "balance", "_change_type", "_commit_version")
SCHEMA = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"
FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
          "predicate => 'balance >= 0')")
FK = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(accounts)), right => TABLE(STREAM(branches)), "
      "left_key => 'id', foreign_key => 'balance % 3', right_key => 'branch')")
# a pipeline: the filter's change feed as the left input of the join
PIPELINE = ("SELECT * FROM FK_JOIN(left => TABLE(CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
            "predicate => 'balance >= 0')), right => TABLE(STREAM(branches)), left_key => 'id', "
            "foreign_key => 'balance % 3', right_key => 'branch')")
# what can be wrong with a file, by format; the first ones are records, which a quarantine takes
# (a JSON change without its key field, a null line: no change, though a Debezium topic's tombstone)
RECORD_FAULTS = {"json": ("truncated", "bad_value", "wrong_type", "garbage_line", "missing_key", "null_line"),
                 "csv": ("bad_value", "wrong_type", "extra_field", "missing_field", "garbage_line")}
# what can be wrong with a Debezium event in a topic's JSON file: all of them records (a plain row
# among the events, an op Debezium does not write)
EVENT_FAULTS = ("truncated", "bad_value", "garbage_line", "no_envelope", "unknown_op")
DEBEZIUM = "debezium"
# a topic's events carry the row's columns; the envelope is built around them
ROW_SCHEMA = "id BIGINT, balance BIGINT"
FILE_FAULTS = {"json": ("unknown_type",), "csv": ("unknown_type",),
               "parquet": ("missing_column", "extra_column", "wrong_type", "zero_bytes", "garbage", "unknown_type")}
# the classes a fault may be refused with
CLASSES = {"missing_column": {"SOURCE_FILE_MISSING_COLUMN"}, "extra_column": {"STREAM_SCHEMA_CHANGED"},
           "zero_bytes": {"STREAM_SOURCE_UNREADABLE"}, "garbage": {"STREAM_SOURCE_UNREADABLE"},
           "unknown_type": {"UNKNOWN_CHANGE_TYPE"}}


@st.composite
def feeds(draw):
    """Runs of valid changes of a few accounts (versions rising across runs)."""
    present: dict[int, int] = {}
    version, runs = 0, []
    for _ in range(draw(st.integers(2, 3))):
        changes = []
        for key in draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)):
            version += 1
            balance = draw(st.integers(-5, 9))
            if key not in present:
                changes.append((key, balance, "insert", version))
                present[key] = balance
            elif draw(st.booleans()):
                changes.append((key, present.pop(key), "delete", version))
            else:
                changes += [(key, present[key], "update_preimage", version), (key, balance, "update_postimage", version)]
                present[key] = balance
        runs.append(changes)
    return runs


def text_of(file_format: str, changes) -> list[str]:
    if file_format == "json":
        return [json.dumps(dict(zip(COLUMNS, c))) for c in changes]
    return [",".join(str(v) for v in c) for c in changes]


def bad_line(file_format: str, fault: str, change) -> str:
    """One change written wrong."""
    row = dict(zip(COLUMNS, change))
    if file_format == "json":
        if fault == "truncated":
            return json.dumps(row)[:-1]
        if fault == "bad_value":
            return json.dumps({**row, "balance": "abc"})
        if fault == "wrong_type":
            return json.dumps({**row, "balance": row["balance"] + 0.5})
        if fault == "missing_key":
            return json.dumps({c: v for c, v in row.items() if c != "id"})
        return json.dumps({**row, "_change_type": "insrt"})
    values = [str(v) for v in change]
    if fault == "bad_value":
        values[1] = "abc"
    elif fault == "wrong_type":
        values[1] += ".5"
    elif fault == "extra_field":
        values.append("7")
    elif fault == "missing_field":
        values = values[:3]
    else:
        values[2] = "insrt"
    return ",".join(values)


def events_of(changes) -> list[tuple[list[int], dict | None]]:
    """A run's changes as Debezium's events, each with the changes it holds (an update's two), and
    a tombstone (None, a ``null`` line) after each delete, as Kafka Connect writes them."""
    rows = [dict(zip(COLUMNS, c)) for c in changes]
    events, taken = [], 0
    for _, event in debezium_rows(rows, ["id", "balance"]):
        if event["op"] is None:
            events.append(([], None))
            continue
        width = 2 if event["op"] == "u" else 1
        if event["op"] == "r":
            event["op"] = "c"  # a run's first version is no snapshot
        events.append((list(range(taken, taken + width)), event))
        taken += width
    return events


def write_events(path, changes, fault: str | None = None, at: int = 0) -> tuple[list[str], list[int]]:
    """The run's file of Debezium events, with ``fault`` in its ``at``-th event; the bad records'
    texts and the changes the bad event held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    events = events_of(changes)
    lines = ["null" if event is None else json.dumps(event) for _, event in events]
    real = [i for i, (_, event) in enumerate(events) if event is not None]
    bad, lost = [], []
    if fault == "garbage_line":
        bad = ["@@ not a record @@"]
        lines.insert(at % (len(lines) + 1), bad[0])
    elif fault is not None:
        index = real[at % len(real)]
        held, event = events[index]
        image = "after" if event["after"] is not None else "before"
        if fault == "truncated":
            lines[index] = json.dumps(event)[:-1]
        elif fault == "bad_value":
            lines[index] = json.dumps({**event, image: {**event[image], "balance": "abc"}})
        elif fault == "no_envelope":  # a plain row landed among the events
            lines[index] = json.dumps(event[image])
        else:
            lines[index] = json.dumps({**event, "op": "x"})
        bad, lost = [lines[index]], held
    path.write_text("\n".join(lines) + "\n")
    return bad, lost


def write_file(path, file_format: str, changes, fault: str | None = None, at: int = 0) -> list[str]:
    """The run's file, with ``fault`` in its ``at``-th change; the bad records' texts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if file_format == "parquet":
        frame = pd.DataFrame(list(changes), columns=list(COLUMNS))
        if fault == "missing_column":
            frame = frame.drop(columns=["balance"])
        elif fault == "extra_column":
            frame["note"] = "x"
        elif fault == "wrong_type":
            frame["balance"] = frame["balance"].astype(str)
        elif fault == "unknown_type":
            frame.loc[at % len(frame), "_change_type"] = "insrt"
        if fault == "zero_bytes":
            path.write_bytes(b"")
        elif fault == "garbage":
            path.write_bytes(b"PAR1 not really\n")
        else:
            frame.to_parquet(path)
        return []
    lines = text_of(file_format, changes)
    bad = []
    if fault in ("garbage_line", "null_line"):
        bad = ["@@ not a record @@" if fault == "garbage_line" else "null"]
        lines.insert(at % (len(lines) + 1), bad[0])
    elif fault is not None:
        index = at % len(lines)
        lines[index] = bad_line(file_format, fault, changes[index])
        bad = [lines[index]]
    path.write_text("\n".join(lines) + "\n")
    return bad


@dataclass
class Case:
    statement: str
    file_format: str
    runs: list
    fault_run: int
    fault: str
    at: int
    rename: bool
    shape: str = "delta"  # or Debezium's events

    @property
    def run_statement(self) -> str:
        """The statement the runs run: over Debezium's events, the stream in that shape."""
        if self.shape != DEBEZIUM:
            return self.statement
        return self.statement.replace("STREAM(accounts)", "STREAM(accounts, format => 'debezium')")

    def write(self, path, changes, fault: str | None = None) -> tuple[list[str], list[int]]:
        """The run's file (``fault`` in it where given): the bad records' texts, and the changes
        the bad record held (which a quarantine takes out)."""
        if self.shape == DEBEZIUM:
            return write_events(path, changes, fault, self.at)
        bad = write_file(path, self.file_format, changes, fault, self.at)
        kept = fault in (None, "garbage_line", "null_line") or not changes
        return bad, [] if kept else [self.at % len(changes)]


def _suffix(file_format: str) -> str:
    return {"json": ".json", "csv": ".csv", "parquet": ".parquet"}[file_format]


class Folders:
    def __init__(self, spark, root, case: Case, tolerant: bool = False):
        self.spark, self.root, self.case = spark, root, case
        self.source, self.out, self.cp = root / "accounts", root / "out", root / "cp"
        self.options = dict(sources={"accounts": str(self.source)}, source_format=case.file_format,
                            checkpoint=str(self.cp), output=str(self.out))
        if case.file_format != "parquet":
            self.options["schemas"] = {"accounts": ROW_SCHEMA if case.shape == DEBEZIUM else SCHEMA}
        if tolerant:
            self.options["bad_records"] = {"accounts": "quarantine"}
        if "STREAM(branches)" in case.statement:  # the right input: a folder of its own, one file
            branches = root / "branches"
            branches.mkdir()
            pd.DataFrame({"branch": [0, 1, 2], "city": ["Oslo", "Rome", "Lima"],
                          "_commit_version": [0, 0, 0]}).to_parquet(branches / "b.parquet")
            self.options["sources"]["branches"] = str(branches)
            self.options["source_format"] = case.file_format
            if case.file_format != "parquet":
                self.options["schemas"]["branches"] = "branch BIGINT, city STRING, _commit_version BIGINT"
                (branches / "b.parquet").unlink()
                lines = ([json.dumps({"branch": b, "city": c, "_commit_version": 0}) for b, c in
                          ((0, "Oslo"), (1, "Rome"), (2, "Lima"))] if case.file_format == "json"
                         else ["0,Oslo,0", "1,Rome,0", "2,Lima,0"])
                (branches / f"b{_suffix(case.file_format)}").write_text("\n".join(lines) + "\n")

    def run(self):
        return run_available_now(self.spark, self.case.run_statement, **self.options)

    def written(self) -> dict[str, str]:
        """A digest of every file of the output and of the state."""
        found = {}
        for top in (self.out, self.cp / "sqlext-state"):
            for folder, _, names in os.walk(top):
                for name in names:
                    path = os.path.join(folder, name)
                    with open(path, "rb") as handle:
                        found[path] = hashlib.sha256(handle.read()).hexdigest()
        return found

    def output(self):
        return multiset(tuple(row.values()) for row in read_rows(self.out))

    def batch(self, changes) -> object:
        """The batch statement over ``changes`` (and the same right input)."""
        view = f"accounts_batch_{abs(hash(str(self.root))) % 10_000_000}"
        self.spark.createDataFrame(changes or [], SCHEMA).createOrReplaceTempView(view)
        statement = self.case.statement.replace("STREAM(accounts)", view)
        if "STREAM(branches)" in self.case.statement:
            self.spark.createDataFrame([(0, "Oslo", 0), (1, "Rome", 0), (2, "Lima", 0)],
                                       "branch BIGINT, city STRING, _commit_version BIGINT") \
                .createOrReplaceTempView(view + "_b")
            statement = statement.replace("STREAM(branches)", view + "_b")
        return multiset(sqlext.sql(self.spark, statement).collect())


@st.composite
def cases(draw, tolerant: bool, statement: str):
    # a filter reads Debezium's events too (the join's inputs would need one order)
    file_format, shape = draw(st.sampled_from([("json", "delta"), ("csv", "delta"), ("parquet", "delta")]
                                              + ([("json", DEBEZIUM)] if statement == FILTER else [])))
    runs = draw(feeds())
    # a quarantine takes the records that do not read, and the change rows of an unknown type
    faults = RECORD_FAULTS.get(file_format, ()) + (("unknown_type",) if tolerant else FILE_FAULTS[file_format])
    if shape == DEBEZIUM:
        faults = EVENT_FAULTS
    # a Parquet source's columns are its first file's: a fault of the columns is a later file's
    first = 1 if file_format == "parquet" and not tolerant else 0
    return Case(statement, file_format, runs, draw(st.integers(first, len(runs) - 1)), draw(st.sampled_from(faults)),
                draw(st.integers(0, 20)), draw(st.booleans()), shape)


STATEMENTS = pytest.mark.parametrize("statement", [FILTER, FK, PIPELINE], ids=["filter", "fk_join", "pipeline"])


@pytest.mark.spark
@STATEMENTS
@settings(max_examples=examples(3, 30), suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_bad_file_is_refused_by_name_and_its_correction_gives_the_batch_result(spark, tmp_path_factory, statement,
                                                                                 data):
    refused_then_corrected(spark, tmp_path_factory.mktemp("strict"), data.draw(cases(tolerant=False,
                                                                                     statement=statement)))


@pytest.mark.spark
@STATEMENTS
@settings(max_examples=examples(2, 20), suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_bad_records_are_quarantined_once_and_the_good_ones_give_the_batch_result(spark, tmp_path_factory, statement,
                                                                                  data):
    quarantined_once(spark, tmp_path_factory.mktemp("tolerant"), data.draw(cases(tolerant=True, statement=statement)))


# records that read but cannot be taken (issue 54): a JSON change without its key field, a null
# line among change rows, a plain row among a topic's events (whose tombstones are null lines), run
# in every default run (the draws above reach them too, the nightly profile often)
PINNED = [(FILTER, "delta", "missing_key"), (FK, "delta", "null_line"), (FILTER, DEBEZIUM, "no_envelope")]
PINNED_RUNS = [[(1, 5, "insert", 1), (2, 7, "insert", 2)],
               [(1, 5, "update_preimage", 3), (1, -2, "update_postimage", 3), (2, 7, "delete", 4), (3, 1, "insert", 5)]]


@pytest.mark.parametrize("tolerant", [False, True], ids=["strict", "quarantined"])
@pytest.mark.parametrize("statement, shape, fault", PINNED, ids=[fault for *_, fault in PINNED])
def test_records_without_a_key_or_an_envelope_and_null_lines(spark, tmp_path, statement, shape, fault, tolerant):
    case = Case(statement, "json", PINNED_RUNS, 1, fault, 3, rename=False, shape=shape)
    (quarantined_once if tolerant else refused_then_corrected)(spark, tmp_path, case)


def refused_then_corrected(spark, root, case: Case) -> None:
    """Strict: the run that meets the bad file stops with a classed error naming it, nothing
    written; corrected (in place, or under another name), the runs add up to the batch result."""
    folders = Folders(spark, root, case)
    suffix = _suffix(case.file_format)
    for number, changes in enumerate(case.runs):
        name = folders.source / f"run-{number}{suffix}"
        if number != case.fault_run:
            case.write(name, changes)
            folders.run()
            continue
        case.write(name, changes, case.fault)
        before = folders.written()
        with pytest.raises(SqlextError) as raised:
            folders.run()
        expected = CLASSES.get(case.fault, {"BAD_RECORD"})
        if case.file_format == "parquet" and case.fault == "wrong_type":
            expected = {"STREAM_SCHEMA_CHANGED"}
        assert raised.value.error_class in expected, str(raised.value)
        assert name.name in str(raised.value), str(raised.value)
        assert folders.written() == before  # nothing written, the state untouched
        if case.rename:  # corrected under another name, the bad file moved out
            name.unlink()
            name = folders.source / f"run-{number}-fixed{suffix}"
        case.write(name, changes)
        folders.run()
    every = [c for run in case.runs for c in run]
    assert folders.output() == folders.batch(every)


def quarantined_once(spark, root, case: Case) -> None:
    """Tolerant: each bad record is in the quarantine once, also when the batch that met it is
    redone after losing its commit, and the good records add up to the batch result."""
    folders = Folders(spark, root, case, tolerant=True)
    suffix = _suffix(case.file_format)
    good, bad, unknown = [], [], []
    for number, changes in enumerate(case.runs):
        fault = case.fault if number == case.fault_run else None
        written, lost = case.write(folders.source / f"run-{number}{suffix}", changes, fault)
        if fault == "unknown_type":  # a record that reads: quarantined as its values
            unknown.append(changes[case.at % len(changes)])
        else:
            bad += written
        good += [c for i, c in enumerate(changes) if i not in lost]
        folders.run()
        if number == case.fault_run:  # the batch's commit is lost: it is redone
            commits = folders.cp / "commits"
            last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
            (commits / str(last)).unlink()
            (commits / f".{last}.crc").unlink(missing_ok=True)
            folders.run()
    quarantine = pd.read_parquet(folders.cp / "quarantine")
    records = quarantine[quarantine["error_class"] == "BAD_RECORD"]
    assert sorted(records["record"]) == sorted(bad)
    changes = quarantine[quarantine["error_class"] == "UNKNOWN_CHANGE_TYPE"]
    assert [(r["id"], r["_change_type"]) for r in map(json.loads, changes["record"])] == \
        [(change[0], "insrt") for change in unknown]
    assert len(quarantine) == len(bad) + len(unknown)
    if case.file_format == "parquet":  # the row of the file
        assert list(changes["line"]) == [case.at % len(case.runs[case.fault_run]) + 1]
    assert all(f.endswith(f"run-{case.fault_run}{suffix}") for f in quarantine["file"])
    assert folders.output() == folders.batch(good)
