"""What a checkpoint and its output folder were made for, and the check that keeps them so.

A checkpoint holds the progress and state of one statement, and its output folder the rows
that statement wrote. Run with another statement, another emit mode or key, the state would be
read under the wrong meaning and the output would mix two results (or, for ``emit => 'final'``,
replace the change feed an earlier statement appended), so a run on a checkpoint or output
folder made for something else is refused before anything is read or written, as Spark refuses
a checkpoint whose query changed incompatibly.

A checkpoint whose state an earlier version of sqlext wrote, in another layout, is refused
the same way. The first run records the statement (its normalised text, function, emit mode
and keys) in ``<checkpoint>/sqlext-statement.json`` and, naming the checkpoint, in
``<output>/_sqlext_statement.json`` (Spark's file readers skip names starting with ``_``); the
output columns are recorded by the first write of rows. Later runs compare. The columns of
every source are recorded beside them (``sqlext-sources.json``): a change there is
``[STREAM_SCHEMA_CHANGED]``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from sqlext.errors import SqlextError
from sqlext.storage import Folder, resolve
from sqlext.streaming.schema_evolution import adds, changes, grown

FUNCTION = "sqlext stream"
STATEMENT_FILE = "sqlext-statement.json"
OUTPUT_FILE = "_sqlext_statement.json"
SOURCES_FILE = "sqlext-sources.json"
SOURCE_BUILDS_FILE = "sqlext-source-builds.json"  # the build of each source that is sqlext output
# the incremental runs' state, and the file naming the layout its states are kept in
STATE_FOLDER = "sqlext-state"
# in the checkpoint: the last batch whose output files were moved into place
OUTPUT_COMMITTED = "sqlext-output-commit.json"
LAYOUT_FILE = "layout"
LAYOUT = "keyed state: one compacted base and one cumulative delta per state"
# what to say about starting over, by surface
START_OVER = "start over with a new checkpoint and an empty output folder"
START_OVER_DBT = ("rebuild the table from the whole history (dbt build --full-refresh; full_refresh=True in "
                  "sqlext.streaming.run_into_table)")


@dataclass(frozen=True)
class Purpose:
    """What a statement asks of its checkpoint: the statement's normalised text, the function
    it runs incrementally, and that call's emit mode and keys."""

    statement: str
    function: str
    emit: str | None = None
    keys: tuple[str, ...] = ()
    columns: tuple[tuple[str, str], ...] | None = field(default=None, compare=False)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.statement.encode()).hexdigest()[:16]

    def as_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "statement": self.statement, "function": self.function,
                "emit": self.emit, "keys": list(self.keys),
                "columns": None if self.columns is None else [list(c) for c in self.columns]}

    @classmethod
    def from_json(cls, data: dict) -> "Purpose":
        columns = data.get("columns")
        return cls(data["statement"], data["function"], data.get("emit"), tuple(data.get("keys") or ()),
                   None if columns is None else tuple(tuple(c) for c in columns))


def claim(checkpoint: Folder, output: Folder | None, purpose: Purpose, start_over: str = START_OVER) -> None:
    """Refuse a run of ``purpose`` on a checkpoint or output folder made for something else
    (``[STREAM_CHECKPOINT_MISMATCH]``, ``[STREAM_OUTPUT_IN_USE]``); record the purpose on the
    first run. A checkpoint that never committed a batch is taken over by the new statement
    (nothing of the old one was complete); one that committed batches before this record
    existed is adopted as it is."""
    checkpoint_id = checkpoint.uri
    output_id = None if output is None else output.uri
    recorded = (checkpoint / STATEMENT_FILE).read_json()
    committed = _committed(checkpoint)
    state = checkpoint / STATE_FOLDER
    if committed and state.entries() and not (state / LAYOUT_FILE).exists():
        raise SqlextError("STREAM_CHECKPOINT_MISMATCH", function=FUNCTION, checkpoint=checkpoint,
                          differences="its state was written by an earlier version of sqlext, in a layout this "
                                      "version does not read", fix=_fix(start_over))
    if recorded is not None and committed:
        before = Purpose.from_json(recorded)
        if before != purpose:
            raise SqlextError("STREAM_CHECKPOINT_MISMATCH", function=FUNCTION, checkpoint=checkpoint,
                              differences=differences(before, purpose), fix=_fix(start_over))
        if output_id is not None and not _same(recorded.get("output"), output):
            raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=output,
                              why=f"is not the folder this checkpoint writes to ({recorded['output']})",
                              fix=f"Run with that output folder, or {start_over}.")
    marker = None if output is None else (output / OUTPUT_FILE).read_json()
    if output is not None and marker is None and not committed:
        held = sorted(e.name for e in output.entries() if not e.name.startswith((".", "_")))
        if held:
            raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=output,
                              why=f"already holds files that no run of this checkpoint wrote ({', '.join(held[:5])})",
                              fix=f"Name an empty or new output folder, or {start_over}.")
    if marker is not None and not _same(marker.get("checkpoint"), checkpoint, empty=False):
        raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=output,
                          why=f"holds the output of another checkpoint ({marker.get('checkpoint')})",
                          fix="Run with that checkpoint, or name another output folder.")
    if recorded is None or Purpose.from_json(recorded) != purpose or recorded.get("output") != output_id:
        if recorded is None:  # a folder that cannot be made is named as the checkpoint ([STORAGE_ERROR])
            checkpoint.mkdirs()
        (checkpoint / STATEMENT_FILE).write_json({**purpose.as_json(), "output": output_id})
    if output is not None and (marker is None or Purpose.from_json(marker) != purpose
                               or marker.get("checkpoint") != checkpoint_id):
        if marker is None:
            output.mkdirs()
        (output / OUTPUT_FILE).write_json({**purpose.as_json(), "checkpoint": checkpoint_id})


class Before:
    """What a run's checkpoint and output folders held before it claimed them, so that a first
    run that fails (no batch committed) takes back what it left: the folders it created, or
    else the records it wrote. The next run then starts as the first did."""

    def __init__(self, checkpoint: Folder, output: Folder | None):
        self.checkpoint = checkpoint
        self.places = [(folder, folder.exists(), (folder / record).exists())
                       for folder, record in ((checkpoint, STATEMENT_FILE), (output, OUTPUT_FILE))
                       if folder is not None]

    def undo(self) -> None:
        """After a failed run: if no batch of the checkpoint was ever committed, delete each
        folder the run created and each record it wrote in a folder that was there before."""
        try:
            if _committed(self.checkpoint):
                return
            for folder, existed, had_record in self.places:
                record = STATEMENT_FILE if folder == self.checkpoint else OUTPUT_FILE
                if not existed:
                    folder.delete()
                elif not had_record:
                    (folder / record).delete()
        except SqlextError:  # the store failed again: the run's own error is the one to report
            pass


def _same(recorded: str | None, folder: Folder, empty: bool = True) -> bool:
    """Whether a recorded place is ``folder`` (as a URI; an earlier sqlext recorded local paths
    as plain paths). Nothing recorded is the same where ``empty`` says so."""
    if recorded is None:
        return empty
    return recorded == folder.uri or (recorded.startswith("/") and "file:" + recorded == folder.uri)


def check_columns(checkpoint: Folder, output: Folder | None, columns: list[tuple[str, str]]) -> None:
    """The output's columns (name, type) against those the first write recorded; recorded on
    the first write. Different columns would mix two tables in one folder; but where a source's
    columns grew or widened since the output's were recorded (as its schema evolution allowed:
    :func:`check_source_columns`), columns added or widened are the same table grown, and
    recorded. Any other change (a joined view's columns changed under the same text) is refused."""
    path = checkpoint / STATEMENT_FILE
    recorded = path.read_json()
    if recorded is None:
        return
    before = None if recorded.get("columns") is None else [tuple(c) for c in recorded["columns"]]
    if before == [tuple(c) for c in columns] and recorded.get("sources") is not None:
        return  # the write of every batch: no more reads
    sources = _sources_fingerprint(checkpoint)
    if before == [tuple(c) for c in columns]:  # a checkpoint of an earlier sqlext: noted from now on
        recorded["sources"] = sources
        path.write_json(recorded)
        return
    evolved = before is None or recorded.get("sources") not in (None, sources)
    wider = grown(before, columns) if before is not None and evolved else columns
    if wider is None or not evolved:
        raise SqlextError("STREAM_CHECKPOINT_MISMATCH", function=FUNCTION, checkpoint=checkpoint,
                          differences=f"its output columns were ({_columns(before)}), this run's are "
                                      f"({_columns(columns)})",
                          fix=_fix(START_OVER))
    recorded["columns"], recorded["sources"] = [list(c) for c in wider], sources
    path.write_json(recorded)
    marker = None if output is None else (output / OUTPUT_FILE).read_json()
    if marker is not None:
        marker["columns"] = recorded["columns"]
        (output / OUTPUT_FILE).write_json(marker)


def _sources_fingerprint(checkpoint: Folder) -> str:
    """The sources' recorded columns, as a digest: it changes when a source's columns evolve."""
    recorded = (checkpoint / SOURCES_FILE).read_json() or {}
    columns = {name: entry if isinstance(entry, list) else entry["columns"] for name, entry in recorded.items()}
    return hashlib.sha256(json.dumps(columns, sort_keys=True).encode()).hexdigest()[:16]


def output_columns(checkpoint: Folder):
    """The output's columns the first write recorded (Spark columns); None before it."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    columns = ((checkpoint / STATEMENT_FILE).read_json() or {}).get("columns")
    if not columns:
        return None
    return StructType([StructField(name, _parse_datatype_string(kind)) for name, kind in columns])


def differences(before: Purpose, now: Purpose) -> str:
    """What differs between two purposes, in words (the statement's texts when nothing else does)."""
    said = []
    if before.function != now.function:
        said.append(f"it ran {before.function}, this statement runs {now.function}")
    if before.emit != now.emit:
        said.append(f"emit => {before.emit!r} then, {now.emit!r} now")
    if before.keys != now.keys:
        said.append(f"{', '.join(before.keys) or 'no key'} then, {', '.join(now.keys) or 'no key'} now")
    if before.statement != now.statement:
        said.append(f"the statement was: {_short(before.statement)}; this run's is: {_short(now.statement)}")
    return "; ".join(said)


def _fix(start_over: str) -> str:
    return "Run the statement it was made for, or " + start_over


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def _columns(columns) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)


def _committed(checkpoint: Folder) -> bool:
    """Whether Spark committed a batch of this checkpoint, or a run committed a part of one
    (:mod:`sqlext.streaming.batch_parts`) or the output of one."""
    from sqlext.streaming.batch_parts import parts_committed

    return any(e.name.isdigit() for e in (checkpoint / "commits").entries()) \
        or (checkpoint / OUTPUT_COMMITTED).exists() or parts_committed(checkpoint / STATE_FOLDER)


def upstream_build(spark, folder: Folder) -> str | None:
    """The build of a folder that another sqlext run writes its output to: the id Spark gave
    that run's checkpoint when it was made (``<checkpoint>/metadata``), which starting the run
    over (a new checkpoint, a dbt full refresh) replaces. None for any other folder."""
    marker = (folder / OUTPUT_FILE).read_json()
    if not marker or not marker.get("checkpoint"):
        return None
    try:
        metadata = (resolve(spark, marker["checkpoint"]) / "metadata").read_json()
    except SqlextError:  # its checkpoint is gone or out of reach: nothing to compare
        return None
    return str(metadata["id"]) if metadata and metadata.get("id") else None


def check_source_build(checkpoint: Folder, name: str, build: str | None) -> None:
    """Refuse a run whose stream ``name`` is another sqlext run's output that started over
    since this checkpoint's runs read it (``[STREAM_SOURCE_REBUILT]``): the rebuilt output's
    files are named as its first files were (by batch number), and Spark's file stream, which
    remembers the files it read by name, would skip them without an error. Record the build
    the first time."""
    if build is None:
        return
    path = checkpoint / SOURCE_BUILDS_FILE
    recorded = path.read_json() or {}
    if recorded.get(name) not in (None, build) and _committed(checkpoint):
        raise SqlextError("STREAM_SOURCE_REBUILT", function=FUNCTION, what="the statement", rebuilt=name,
                          fix="Start this statement over too (a new checkpoint and an empty output folder; for "
                              "a dbt model, dbt build --full-refresh --select <model>+, or refresh the upstream "
                              "with its readers: --select <upstream>+). Nothing was read or written.")
    if recorded.get(name) != build:
        path.write_json({**recorded, name: build})


def check_source_columns(checkpoint: Folder, name: str, schema, holders=None, mode: str = "fail",
                         absent=None) -> set[str]:
    """Compare a source's columns with those recorded by the checkpoint's earlier runs (in
    ``<checkpoint>/sqlext-sources.json``), as the source's schema evolution ``mode`` allows
    (:mod:`sqlext.streaming.schema_evolution`); record them on the first run and after an accepted
    change. ``holders(columns)``, where given, names the files that hold columns the first run did
    not see (a folder's). Returns the source's columns that a file may lack (rows of files written
    before the column was added): those added by an accepted change, and on the first run those
    ``absent()`` names (the columns some of the folder's files do not hold), where the mode adds
    columns."""
    path = checkpoint / SOURCES_FILE
    recorded = path.read_json() or {}
    now = [[f.name, f.dataType.simpleString()] for f in schema.fields]
    entry = recorded.get(name)
    if entry is None:
        added = sorted(absent() or []) if absent is not None and adds(mode) else []
        recorded[name] = {"columns": now, "added": added} if added else now
        path.write_json(recorded)
        return set(added)
    # an entry is the list of columns, or (once a file may lack some) the columns and those
    before, added = (entry, []) if isinstance(entry, list) else (entry["columns"], list(entry.get("added", [])))
    refused = changes(before, now, mode)
    known = {c for c, _ in before}
    new = [n for n, _ in now if n not in known]
    files = holders(new) if holders is not None and new and refused else []
    if files:
        refused.append(f"in {', '.join(files[:3])}{' and others' if len(files) > 3 else ''}")
    if refused:
        raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=name, change="; ".join(refused))
    if [list(c) for c in before] != now:
        added = sorted(set(added) | set(new))
        recorded[name] = {"columns": now, "added": added} if added else now
        path.write_json(recorded)
    return set(added)
