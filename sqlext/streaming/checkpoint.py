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

A checkpoint has an identity of its own: the id in ``<checkpoint>/metadata``, the record Spark
keeps of a checkpoint (``{"id": ...}``), given once, when the checkpoint is made (sqlext writes
it on the first run, before Spark starts, so that the output can record it; Spark then reads it
as its own). The output records it beside the checkpoint's path, so a checkpoint made again at
the path of a deleted one (``rm -rf cp`` and the same command) is another checkpoint, and its
runs are refused an output that holds the old one's rows: it would write them a second time,
under the old files' names. An output an earlier sqlext marked with the checkpoint's path only
is adopted by the checkpoint at that path if that checkpoint committed a batch (it is the one
that wrote it, as far as can be told); a new checkpoint there is refused as above.
:func:`clear_for_full_refresh` deletes a checkpoint and its output together, to start over.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field

from sqlext.errors import SqlextError
from sqlext.storage import Folder, resolve
from sqlext.streaming.schema_evolution import adds, changes, grown

FUNCTION = "sqlext stream"
STATEMENT_FILE = "sqlext-statement.json"
METADATA_FILE = "metadata"  # Spark's record of the checkpoint, {"id": ...}: its identity
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
START_OVER = ("start over: --full-refresh (full_refresh=True in Python) deletes the checkpoint and the output "
              "folder and runs from the start; or use a new checkpoint and an empty output folder")
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
    first run, and give a new checkpoint its identity (:func:`identity`). A checkpoint that never
    committed a batch is taken over by the new statement (nothing of the old one was complete);
    one that committed batches before this record existed is adopted as it is. An output that
    holds the rows of another checkpoint (another path, or a checkpoint made again at the same
    path) is refused; one that holds no rows yet is taken over."""
    checkpoint_id = checkpoint.uri
    output_id = None if output is None else output.uri
    recorded = (checkpoint / STATEMENT_FILE).read_json()
    committed = committed_any(checkpoint)
    made = identity(checkpoint)
    ours = made or str(uuid.uuid4())  # a new checkpoint's, written below once the run may go on
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
    held = [] if output is None else rows_held(output)
    if output is not None and marker is None and not committed and held:
        raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=output,
                          why=f"already holds files that no run of this checkpoint wrote ({', '.join(held[:5])})",
                          fix=f"Name an empty or new output folder, or {start_over}.")
    if marker is not None and held and not _written_by(marker, checkpoint, ours, committed):
        raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=output,
                          why=_whose(marker, checkpoint),
                          fix=f"Name a new output folder for this checkpoint, or {start_over}.")
    if made is None:  # a folder that cannot be made is named as the checkpoint ([STORAGE_ERROR])
        checkpoint.mkdirs()
        (checkpoint / METADATA_FILE).write_bytes(json.dumps({"id": ours}).encode())
    if recorded is None or Purpose.from_json(recorded) != purpose or recorded.get("output") != output_id:
        (checkpoint / STATEMENT_FILE).write_json({**purpose.as_json(), "output": output_id})
    if output is not None and (marker is None or Purpose.from_json(marker) != purpose
                               or marker.get("checkpoint") != checkpoint_id or marker.get("checkpoint_id") != ours):
        if marker is None:
            output.mkdirs()
        (output / OUTPUT_FILE).write_json({**purpose.as_json(), "checkpoint": checkpoint_id, "checkpoint_id": ours})


def identity(checkpoint: Folder) -> str | None:
    """The checkpoint's identity: the id of Spark's record of it (``<checkpoint>/metadata``),
    given once, when the checkpoint is made (:func:`claim`, or Spark). None before its first run."""
    made = (checkpoint / METADATA_FILE).read_json()
    return str(made["id"]) if isinstance(made, dict) and made.get("id") else None


def rows_held(output: Folder) -> list[str]:
    """The names in an output folder that readers read (not Spark's, sqlext's or Delta's records
    and pending files, whose names start with ``_`` or ``.``)."""
    return sorted(e.name for e in output.entries() if not e.name.startswith((".", "_")))


def _written_by(marker: dict, checkpoint: Folder, ours: str, committed: bool) -> bool:
    """Whether the output a marker describes is this checkpoint's: the marker names its path and
    its identity; or, where an earlier sqlext recorded only the path, the checkpoint there
    committed batches (a checkpoint made anew at the path has committed none). A checkpoint
    copied or moved to another path is not the output's: two copies would each write the same
    batches."""
    if not _same(marker.get("checkpoint"), checkpoint, empty=False):
        return False
    return marker["checkpoint_id"] == ours if marker.get("checkpoint_id") else committed


def _whose(marker: dict, checkpoint: Folder) -> str:
    """Why an output is another checkpoint's, naming both checkpoints."""
    theirs = marker.get("checkpoint")
    if theirs is not None and _same(theirs, checkpoint, empty=False):
        return (f"holds the rows of an earlier checkpoint at {theirs}, which was deleted or made again since: the "
                "checkpoint there now is a new one, whose runs would write those rows a second time")
    return f"holds the output of another checkpoint ({theirs}), not of {checkpoint}"


def clear_for_full_refresh(checkpoint: Folder, output: Folder | None, say=None, runs_only: bool = True) -> list[Folder]:
    """Delete a checkpoint and its output folder together, so that the next run starts from
    scratch (``--full-refresh``, and dbt's full refresh of a model run into a table); the folders
    deleted. ``say`` is told which first, in a line. Where ``runs_only``, a folder that holds
    what no run of sqlext made is refused (``[FULL_REFRESH_REFUSED]``) and nothing is deleted: a
    checkpoint without Spark's or sqlext's records, an output with data files and no marker (a
    path given by mistake, such as a folder of the user's own files)."""
    present = [f for f in (checkpoint, output) if f is not None and f.exists()]
    for folder in present if runs_only else []:
        names = sorted(e.name for e in folder.entries())
        if folder == checkpoint and names and not set(names) & {METADATA_FILE, STATEMENT_FILE, "offsets", "commits"}:
            raise SqlextError("FULL_REFRESH_REFUSED", function=FUNCTION, path=folder,
                              why=f"is not the checkpoint of a run (it holds {_names(names)}, and no record of one)")
        if folder == output and rows_held(folder) and not (folder / OUTPUT_FILE).exists():
            raise SqlextError("FULL_REFRESH_REFUSED", function=FUNCTION, path=folder,
                              why=f"holds files that no run wrote ({_names(rows_held(folder))})")
    if say is not None:
        said = " and ".join(f"the {'checkpoint' if f == checkpoint else 'output folder'} {f}" for f in present)
        say(f"-- full refresh: deleting {said}; the run starts from scratch" if present else
            "-- full refresh: no checkpoint or output folder to delete; the run starts from scratch")
    for folder in present:
        folder.delete()
    return present


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (" and others" if len(names) > 5 else "")


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
            if committed_any(self.checkpoint):
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


def committed_any(checkpoint: Folder) -> bool:
    """Whether Spark committed a batch of this checkpoint, or a run committed a part of one
    (:mod:`sqlext.streaming.batch_parts`) or the output of one."""
    from sqlext.streaming.batch_parts import parts_committed

    return any(e.name.isdigit() for e in (checkpoint / "commits").entries()) \
        or (checkpoint / OUTPUT_COMMITTED).exists() or parts_committed(checkpoint / STATE_FOLDER)


def upstream_build(spark, folder: Folder) -> str | None:
    """The build of a folder that another sqlext run writes its output to: the identity of that
    run's checkpoint (:func:`identity`), which starting the run over (a new checkpoint, a full
    refresh) replaces; the output records it, and an output an earlier sqlext marked with the
    checkpoint's path only is looked up there. None for any other folder."""
    marker = (folder / OUTPUT_FILE).read_json()
    if not marker or not marker.get("checkpoint"):
        return None
    if marker.get("checkpoint_id"):
        return str(marker["checkpoint_id"])
    try:
        return identity(resolve(spark, marker["checkpoint"]))
    except SqlextError:  # its checkpoint is gone or out of reach: nothing to compare
        return None


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
    if recorded.get(name) not in (None, build) and committed_any(checkpoint):
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
