"""Spark's own records of a streaming query's micro-batches, in its checkpoint: which files each
batch took from a file source (the offset log names each source's log offsets a batch covers;
the source's file log, the files each log offset added), read without Spark, and the forgetting
of a batch that was planned and failed on its input (:func:`forget_batch`)."""

from __future__ import annotations

import json
from urllib.parse import unquote, urlparse

from sqlext.errors import SqlextError
from sqlext.storage import Folder


def batch_files(checkpoint: Folder, batch_id: int, source: int, folder: Folder) -> list[Folder] | None:
    """The files micro-batch ``batch_id`` of the query checkpointed in ``checkpoint`` reads from
    its ``source``-th source, a Parquet folder: from Spark's own records of the batch (the
    query's offset log names the source's log offsets a batch covers; the source's file log, the
    files each log offset added). None where these records are not as read here or name files
    outside ``folder``: the caller then lets Spark read the batch."""
    entries = batch_entries(checkpoint, batch_id, source)
    if entries is None:
        return None
    try:
        files = []
        inside = _place(folder.uri)
        for entry in entries:
            place = _place(entry["path"])
            parent, _, name = place[2].rpartition("/")
            if (place[0], place[1], parent) != (inside[0], inside[1], inside[2].rstrip("/")):
                return None
            files.append(folder / name)
        return files
    except (ValueError, KeyError, TypeError):
        return None


def batch_entries(checkpoint: Folder, batch_id: int, source: int) -> list[dict] | None:
    """The entries (``{"path": ...}``) of the files micro-batch ``batch_id`` read from its
    ``source``-th source, a file source, from Spark's offset and file logs (see
    :func:`batch_files`); None where the records are not as read here."""
    def log_offset(batch: int):
        lines = (checkpoint / "offsets" / str(batch)).read_bytes().decode().splitlines()
        if not lines or lines[0] != "v1" or len(lines) < 3 + source:
            raise ValueError("an offset log entry in another form")
        return _log_offset(lines[2 + source])

    try:
        current = log_offset(batch_id)
        previous = log_offset(batch_id - 1) if batch_id > 0 else -1
        log = checkpoint / "sources" / str(source)
        names = None
        entries = []
        for offset in range(previous + 1, current + 1):
            if names is None:
                names = {e.name for e in log.entries()}
            if str(offset) in names:
                entries += _log_entries(log / str(offset))
                continue
            compacted = sorted(int(n.split(".")[0]) for n in names
                               if n.endswith(".compact") and n.split(".")[0].isdigit() and int(n.split(".")[0]) >= offset)
            if not compacted:
                return None
            entries += [e for e in _log_entries(log / f"{compacted[0]}.compact") if e.get("batchId") == offset]
        return entries
    except (OSError, ValueError, KeyError, TypeError, SqlextError):
        return None


# the errors of a run's input (what a file holds, not the statement or the store): the batch that
# met one is forgotten (forget_batch), so that the next run reads the folders as they are then
INPUT_ERRORS = frozenset({
    "BAD_RECORD", "SOURCE_FILE_MISSING_COLUMN", "STREAM_SCHEMA_CHANGED", "STREAM_SOURCE_UNREADABLE",
    "UNKNOWN_CHANGE_TYPE", "AMBIGUOUS_ORDER", "NULL_ORDER_VALUE", "NULL_SEQUENCE_VALUE", "LATE_CHANGE",
    "DELETE_OF_ABSENT_ROW", "NOT_A_CHANGE_EVENT",
})


def forget_batch(checkpoint: Folder) -> int | None:
    """Forget the micro-batch Spark planned and did not commit, after it failed on its input.

    Spark plans a batch before it runs it: the offset log's entry for the batch, and, for each
    file source, the entries of the source's file log that name the files it takes. A batch that
    failed is run again with the same files, so a bad file that was moved out of the folder would
    fail every later run, and a corrected file under another name would wait behind it. Here the
    batch's offset entry is deleted first, then every file log entry past the offsets of the last
    committed batch: Spark then plans the batch again from the folders as they are (were the
    process to stop between the two, the next run would meet the bad file again and say so; it
    never skips one). Nothing else of the batch exists: a run that fails writes nothing it
    commits. Returns the batch forgotten (None where the last batch planned was committed)."""
    batch = planned_batch(checkpoint)
    if batch is None:
        return None
    offsets = checkpoint / "offsets"
    planned = _numbers(offsets)
    previous = max((n for n in planned if n < batch), default=None)
    files_sources = _file_offsets(offsets / str(batch))
    kept = _file_offsets(offsets / str(previous)) if previous is not None else {}
    _delete_log_file(offsets, str(batch))
    for source in files_sources:
        log = checkpoint / "sources" / str(source)
        for entry in log.entries():
            number = entry.name.split(".")[0]
            if not entry.name.startswith(".") and number.isdigit() and int(number) > kept.get(source, -1):
                _delete_log_file(log, entry.name)
    return batch


def planned_batch(checkpoint: Folder) -> int | None:
    """The micro-batch Spark planned and did not commit; None where the last one planned was."""
    planned = _numbers(checkpoint / "offsets")
    committed = _numbers(checkpoint / "commits")
    if not planned or (committed and max(committed) >= max(planned)):
        return None
    return max(planned)


def _numbers(folder: Folder) -> list[int]:
    return [int(e.name) for e in folder.entries() if e.name.isdigit()]


def _file_offsets(path: Folder) -> dict[int, int]:
    """The log offsets of the file sources in one entry of Spark's offset log, by source."""
    found = {}
    for index, line in enumerate(path.read_bytes().decode().splitlines()[2:]):
        try:
            offset = _log_offset(line)
        except (ValueError, KeyError, TypeError):
            continue  # not a file source's
        if offset >= 0:  # a source with no offset yet may be any source: its log is left alone
            found[index] = offset
    return found


def _log_offset(line: str) -> int:
    """A file source's log offset in its line of an offset log entry (-1: none yet); an error
    for another source's line."""
    entry = line.strip()
    return -1 if entry in ("-", "null") else int(json.loads(entry)["logOffset"])


def _delete_log_file(folder: Folder, name: str) -> None:
    """One file of Spark's logs, and the checksum Hadoop's local file system keeps beside it."""
    (folder / name).delete()
    (folder / f".{name}.crc").delete()


def _place(uri: str) -> tuple[str, str, str]:
    """A URI as (scheme, authority, path), a plain path as a local file's."""
    parsed = urlparse(uri)
    return (parsed.scheme or "file").lower(), parsed.netloc, unquote(parsed.path)


def _log_entries(path: Folder) -> list[dict]:
    lines = path.read_bytes().decode().splitlines()
    if not lines or lines[0] != "v1":
        raise ValueError("a file log in another form")
    return [json.loads(line) for line in lines[1:] if line.strip()]
