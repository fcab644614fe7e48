"""What one incremental run read and wrote, counted from its files, for ``sqlext stream`` to
print after every run (also a run with nothing new).

Read: the files each micro-batch of the run took from a folder source (Spark's own offset and
file logs, :func:`sqlext.streaming.batches.batch_entries`) and their rows: for Parquet from the
files' footers, for the files of any other format (JSON, CSV) as Spark's reader of the source
counts their records (one Spark job over the run's new files, bad records included). A source
that is not a folder of files gives the rows Spark counted.
Written: the data files of the batches the run committed (named by their batch) and any other
that appeared in the output folder during the run (Spark's own sink names its files otherwise)
and, for Parquet, their rows; for a Delta table, the files its log added, with the rows the log
counts. A batch redone after its files were committed (a run killed before Spark recorded it)
counts them: the run committed that batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from sqlext.errors import counted
from sqlext.storage import Folder, resolve
from sqlext.streaming.bad_records import Quarantine
from sqlext.streaming.batches import batch_entries
from sqlext.streaming.run import output_file


@dataclass
class Counts:
    """A run's counts; None where one cannot be told (the rows of files in another format)."""

    batches: int = 0
    files_read: int | None = 0
    rows_read: int | None = 0
    files_written: int = 0
    rows_written: int | None = 0
    quarantined: int = 0  # bad records the run set aside (sqlext.streaming.bad_records)
    ids: list[int] = field(default_factory=list)  # the batches counted

    def describe(self) -> str:
        """The counts in words.

        >>> Counts(1, 2, 10, 1, 4).describe()
        'read 2 files, 10 rows; wrote 1 file, 4 rows'
        >>> Counts().describe()
        'nothing new: read 0 files, 0 rows; wrote 0 files, 0 rows'
        >>> Counts(1, None, 7, 1, None).describe()
        'read 7 rows; wrote 1 file'
        >>> Counts(1, 1, 3, 1, 2, quarantined=1).describe()
        'read 1 file, 3 rows; wrote 1 file, 2 rows; quarantined 1 bad record'
        """
        read = [_count(self.files_read, "file"), _count(self.rows_read, "row")]
        wrote = [_count(self.files_written, "file"), _count(self.rows_written, "row")]
        said = f"read {', '.join(r for r in read if r)}; wrote {', '.join(w for w in wrote if w)}"
        if self.quarantined:
            said += f"; quarantined {_count(self.quarantined, 'bad record')}"
        return said if self.batches else f"nothing new: {said}"

    def batch_line(self, seconds: float | None = None) -> str:
        """The line of a run that goes on (``--every``) for the batches counted.

        >>> Counts(1, 1, 3, 1, 2, ids=[4]).batch_line(0.5)
        '-- batch 4 in 0.50 s: read 1 file, 3 rows; wrote 1 file, 2 rows'
        >>> Counts(2, 2, 5, 1, 5, ids=[5, 6]).batch_line()
        '-- batches 5-6: read 2 files, 5 rows; wrote 1 file, 5 rows'
        """
        ids = self.ids
        named = f"batch {ids[0]}" if len(ids) == 1 else f"batches {ids[0]}-{ids[-1]}"
        took = f" in {seconds:.2f} s" if seconds is not None else ""
        return f"-- {named}{took}: {self.describe()}"


def _count(number: int | None, noun: str) -> str:
    if number is None:
        return ""
    return counted(number, noun)


class RunCounter:
    """Made before a run (it notes what the checkpoint had committed and the output held: nothing,
    where the run is ``fresh``, a full refresh that deletes both first); :meth:`counts` after it."""

    def __init__(self, spark, checkpoint: str, output: str, output_format: str = "parquet", fresh: bool = False):
        self.spark = spark
        self.checkpoint, self.output = resolve(spark, checkpoint), resolve(spark, output)
        self.output_format = output_format
        self.committed = set() if fresh else committed_batches(self.checkpoint)
        self.files = {} if fresh else self._data_files()
        self._progress_seen = None  # the timestamp of the query's last progress that batch_line saw

    def counts(self, query=None, advance: bool = False) -> Counts:
        """What the batches committed since this counter was made read and wrote; ``advance``:
        since the last call that advanced (the next one counts from there). ``query`` (the
        run's :class:`~sqlext.streaming.RunningQuery`) says how its sources' files are read."""
        batches = sorted(committed_batches(self.checkpoint) - self.committed)
        now = self._data_files()  # at once: a batch committing while the rows are counted is the next one's
        counts = Counts(batches=len(batches), quarantined=Quarantine(self.checkpoint).count(batches), ids=batches)
        spark_rows = 0  # the rows Spark counted, for sources that are not folders of files
        for progress in (query.recentProgress if query is not None else []):
            if progress.get("batchId") in batches:
                spark_rows += int(progress.get("numInputRows") or 0)
        files_known = True
        read: dict[int, list[str]] = {}  # by source: the files its batches read
        for batch in batches:
            for source in range(_sources(self.checkpoint, batch)):
                entries = batch_entries(self.checkpoint, batch, source)
                if entries is None:
                    files_known = False
                    continue
                counts.files_read += len(entries)
                read.setdefault(source, []).extend(e["path"] for e in entries)
        readers = {r.index: r for r in getattr(query, "source_records", None) or []}
        for source, paths in read.items():
            counts.rows_read = _add(counts.rows_read, _rows(paths, self.spark, readers.get(source)))
        if not files_known:
            counts.files_read = None if not counts.files_read else counts.files_read
            counts.rows_read = spark_rows
        written = sorted(name for name in now if name not in self.files or _batch_of(name) in batches)
        counts.files_written = len(written)
        counts.rows_written = None if self.output_format not in ("parquet", "delta") else \
            _add(sum(now[name] for name in written if now[name] is not None),
                 _rows([(self.output / name).uri for name in written if now[name] is None], self.spark))
        if advance:
            self.committed |= set(batches)
            self.files = {name: count for name, count in now.items()
                          if name in self.files or name in written}
        return counts

    def batch_line(self, query) -> str | None:
        """For a run that goes on (``--every``): the line of the batches committed since the
        last call (:meth:`Counts.batch_line`, with the time Spark took for one batch), None
        where none was. The checkpoint is looked at only once Spark reports progress again
        (after each batch, and every few seconds while nothing comes), not on every call."""
        progress = query.lastProgress
        seen = None if progress is None else progress.get("timestamp")
        if seen == self._progress_seen:
            return None
        self._progress_seen = seen
        counts = self.counts(query, advance=True)
        if not counts.batches:
            return None
        took = [p for p in query.recentProgress if p.get("batchId") in counts.ids]
        seconds = took[-1].get("durationMs", {}).get("triggerExecution") if len(took) == 1 else None
        return counts.batch_line(None if seconds is None else seconds / 1000)

    def _data_files(self) -> dict[str, int | None]:
        """The output's data files, with their rows where they are known without reading the
        files: a folder's files (not Spark's or sqlext's records), or a Delta table's."""
        if self.output_format == "delta":
            from sqlext.delta import DeltaOutput
            from sqlext.streaming.checkpoint import FUNCTION

            table = DeltaOutput(self.output, FUNCTION)
            table.locate(self.spark)
            return table.files()
        return dict.fromkeys(_data_files(self.output))


def _add(total: int | None, more: int | None) -> int | None:
    return None if total is None or more is None else total + more


def _rows(paths: list[str], spark, reader=None) -> int | None:
    """The rows of a source's files: of Parquet files from their footers, of files that
    ``reader`` (the source's :class:`~sqlext.streaming.bad_records.SourceRecords`) reads in
    another format as its Spark reader counts their records; None where they are not told (a
    file gone, a format without a reader)."""
    if not paths:
        return 0
    if reader is not None and reader.file_format.lower() != "parquet":
        try:
            return reader.read_files(spark, [unquote(path) for path in paths]).count()
        except Exception:  # noqa: BLE001 - a file gone since: the rows are not told
            return None
    total = 0
    for path in paths:
        try:
            total += resolve(spark, path).parquet_rows()
        except Exception:  # noqa: BLE001 - not Parquet (or gone): the rows are not told
            return None
    return total


def committed_batches(checkpoint: Folder) -> set[int]:
    """The micro-batches a checkpoint's runs committed (Spark's commit log)."""
    try:
        return {int(e.name) for e in (checkpoint / "commits").entries() if e.name.isdigit()}
    except Exception:  # noqa: BLE001 - no commits folder to read: none committed
        return set()


def _data_files(folder: Folder) -> set[str]:
    """The data files at the top of an output folder (not Spark's or sqlext's records)."""
    try:
        return {e.name for e in folder.entries() if not e.is_dir and not e.name.startswith(("_", "."))}
    except Exception:  # noqa: BLE001 - a folder that is not there holds none
        return set()


def _batch_of(name: str) -> int | None:
    """The batch that wrote an output file, from its name (``batch-<id>-...``, ``base-<id>-...``)."""
    found = output_file(name)
    return None if found is None else found[1]


def _sources(checkpoint: Folder, batch: int) -> int:
    """How many sources a batch's offset log entry names (after its version and metadata lines)."""
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_bytes().decode().splitlines()
    except Exception:  # noqa: BLE001 - no entry to read
        return 0
    return max(0, len(lines) - 2)
