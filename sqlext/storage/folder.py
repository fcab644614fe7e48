"""A file or folder in a store as sqlext reads and writes it (:class:`Folder`): its names, small
files written whole, layers that appear whole, Parquet files; and what it asks of the store's IO
(:class:`StoreIO`, which :mod:`sqlext.storage.backends` does through pyarrow or Hadoop). A store's
failure is ``[STORAGE_ERROR]`` (:func:`storage_error`). How a URI becomes a folder:
:mod:`sqlext.storage`."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sqlext.errors import SqlextError

FUNCTION = "sqlext stream"
# stores whose rename of a file or folder is atomic; elsewhere a commit file marks a layer whole
ATOMIC_RENAME = ("file", "hdfs")
COMMIT_SUFFIX = ".commit"
# where a layer is written before it is renamed into place (stores that rename atomically)
PENDING_PREFIX = "_tmp-"


@dataclass(frozen=True)
class Entry:
    """One name in a folder: a file (with its size and modification time) or a folder."""

    name: str
    is_dir: bool
    size: int = 0
    mtime_ns: int = 0


class StoreIO:
    """What a :class:`Folder` asks of the store it is in, on paths in that store: done through
    ``pyarrow.fs`` or through the JVM's Hadoop ``FileSystem`` (:mod:`sqlext.storage.backends`)."""

    atomic_rename: bool
    streams: bool  # whether it writes Arrow buffers as they are (no copy into bytes)

    def store_uri(self, path: str) -> str | None: ...
    def kind(self, path: str) -> str | None: ...
    def entries(self, path: str) -> list[Entry]: ...
    def mkdirs(self, path: str) -> None: ...
    def delete(self, path: str) -> None: ...
    def rename(self, source: str, target: str) -> None: ...
    def read(self, path: str) -> bytes: ...
    def write(self, path: str, data) -> None: ...
    def parquet_metadata(self, path: str): ...
    def read_parquet(self, paths, schema, columns, filter) -> pa.Table: ...

    def parquet_slices(self, paths, schema, rows, where=None) -> Iterator[pa.Table]: ...


class Folder:
    """A file or folder: :attr:`uri` for Spark, and the path in the store that reads and writes
    it for sqlext. Children are made with ``folder / "name"``."""

    def __init__(self, uri: str, io: StoreIO, path: str):
        self.uri, self.io, self.path = uri, io, path

    def __truediv__(self, name: str) -> "Folder":
        return Folder(_join(self.uri, name), self.io, posixpath.join(self.path, name))

    def __repr__(self) -> str:
        return self.uri

    def __str__(self) -> str:
        return self.uri

    def __eq__(self, other) -> bool:
        return isinstance(other, Folder) and self.uri == other.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> "Folder":
        return Folder(self.uri.rstrip("/").rsplit("/", 1)[0], self.io, posixpath.dirname(self.path.rstrip("/")))

    @property
    def store_uri(self) -> str | None:
        """The URI of the file or folder in the store that holds it (a mount table followed),
        for a library that opens stores itself (``file:///data/t``, ``s3://bucket/t``); None
        where the store is known only to Hadoop's connector by another name."""
        return self.io.store_uri(self.path)

    @property
    def atomic_rename(self) -> bool:
        """Whether the store renames a file or folder atomically."""
        return self.io.atomic_rename

    # -- names

    def exists(self) -> bool:
        return self._do("look at", lambda: self.io.kind(self.path) is not None)

    def is_dir(self) -> bool:
        return self._do("look at", lambda: self.io.kind(self.path) == "dir")

    def entries(self) -> list[Entry]:
        """What the folder holds (nothing, where it does not exist)."""
        return self._do("list", lambda: self.io.entries(self.path))

    def mkdirs(self) -> None:
        self._do("create", lambda: self.io.mkdirs(self.path))

    def delete(self) -> None:
        """Delete the file or folder (with all it holds); nothing where it does not exist."""
        self._do("delete", lambda: self.io.delete(self.path))

    def rename_to(self, target: "Folder") -> None:
        """Move to ``target``, replacing what is there: atomic where the store renames atomically."""
        def move():
            if self.io.kind(target.path) is not None:
                self.io.delete(target.path)
            self.io.mkdirs(posixpath.dirname(target.path))
            self.io.rename(self.path, target.path)
        self._do("rename", move, target)

    # -- small files

    def read_bytes(self) -> bytes:
        return self._do("read", lambda: self.io.read(self.path))

    def write_bytes(self, data: bytes, whole: bool = True) -> None:
        """Write the file so that it appears whole: under a temporary name renamed into place,
        or as one object on an object store. ``whole=False`` writes it in place (a file of a
        layer that is not committed yet)."""
        def write():
            self.io.mkdirs(posixpath.dirname(self.path))
            if not self.io.atomic_rename or not whole:
                self.io.write(self.path, data)
                return
            temporary = posixpath.join(posixpath.dirname(self.path), "." + self.name + ".tmp")
            self.io.write(temporary, data)
            if self.io.kind(self.path) is not None:
                self.io.delete(self.path)
            self.io.rename(temporary, self.path)
        self._do("write", write)

    def read_json(self):
        """The JSON the file holds; None where there is no such file or it does not parse."""
        try:
            return json.loads(self.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        except SqlextError as error:
            if isinstance(error.__cause__, FileNotFoundError):
                return None
            raise

    def write_json(self, data) -> None:
        self.write_bytes(json.dumps(data, indent=1).encode())

    # -- layers: folders that appear whole

    def committed(self) -> bool:
        """Whether a layer written with :meth:`write_layer` is whole: its name is there (atomic
        rename), or its commit file (object stores)."""
        if self.io.atomic_rename:
            return self.is_dir()
        return (self.parent / (self.name + COMMIT_SUFFIX)).exists()

    def committed_names(self) -> set[str]:
        """The names of the whole layers in this folder, from one listing."""
        entries = self.entries()
        folders = {e.name for e in entries if e.is_dir and not e.name.startswith(PENDING_PREFIX)}
        if self.io.atomic_rename:
            return folders
        commits = {e.name[:-len(COMMIT_SUFFIX)] for e in entries if e.name.endswith(COMMIT_SUFFIX)}
        return folders & commits

    def pending(self) -> "Folder":
        """Where a layer is written before it is committed: beside it under a temporary name
        (renamed into place), or the layer itself (an object store: the commit file is what
        makes it visible)."""
        if self.io.atomic_rename:
            return self.parent / (PENDING_PREFIX + self.name)
        return self

    def begin_layer(self) -> "Folder":
        """Start writing this layer again: what an earlier attempt left is deleted, and the
        folder to write its files into is returned (commit it with :meth:`commit_layer`)."""
        pending = self.pending()
        if not self.io.atomic_rename:
            (self.parent / (self.name + COMMIT_SUFFIX)).delete()
        pending.delete()
        pending.mkdirs()
        return pending

    def commit_layer(self) -> None:
        """Make the layer written into :meth:`pending` visible, whole."""
        if self.io.atomic_rename:
            self.pending().rename_to(self)
        else:
            (self.parent / (self.name + COMMIT_SUFFIX)).write_bytes(b"")

    def delete_layer(self) -> None:
        if not self.io.atomic_rename:
            (self.parent / (self.name + COMMIT_SUFFIX)).delete()
        self.delete()

    # -- Parquet files

    def files(self, prefix: str = "part-", suffix: str = ".parquet") -> list["Folder"]:
        """The data files of a folder, by name."""
        return [self / e.name for e in sorted(self.entries(), key=lambda e: e.name)
                if not e.is_dir and e.name.startswith(prefix) and e.name.endswith(suffix)]

    def identity(self) -> tuple:
        """What changes when the folder's files are written again: their names, sizes and times."""
        return tuple((e.name, e.size, e.mtime_ns) for e in sorted(self.entries(), key=lambda e: e.name)
                     if not e.is_dir)

    def write_parquet(self, table: pa.Table, row_group_size: int | None = None, whole: bool = True) -> None:
        """Arrow data as one Parquet file that Spark reads, appearing whole. Dictionary encoding
        (costly to write, of no use to numbers that are mostly distinct) only for text and bytes."""
        text = [f.name for f in table.schema
                if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_binary(f.type)]
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=row_group_size, use_dictionary=text, compression="snappy")
        self.write_bytes(sink.getvalue().to_pybytes() if not self.io.streams else sink.getvalue(), whole=whole)

    def parquet_rows(self) -> int:
        """The rows of one Parquet file, from its footer."""
        return self._do("read", lambda: self.io.parquet_metadata(self.path).num_rows)

    def parquet_schema(self, as_read: bool = False) -> pa.Schema:
        """The columns of one Parquet file, from its footer. ``as_read``: as :func:`read_parquet`
        reads them, where Spark's INT96 timestamps (its default for TIMESTAMP columns) are
        instants in microseconds, in UTC, as Spark reads them; not in a file whose footer says
        Spark wrote them rebased to the old Julian calendar, which Arrow does not undo."""
        metadata = self._do("read", lambda: self.io.parquet_metadata(self.path))
        schema = metadata.schema.to_arrow_schema()
        if not as_read or b"org.apache.spark.legacyINT96" in (metadata.metadata or {}):
            return schema
        for i in range(metadata.num_columns):
            column = metadata.schema.column(i)
            if column.physical_type == "INT96" and "." not in column.path:
                index = schema.get_field_index(column.path)
                schema = schema.set(index, schema.field(index).with_type(pa.timestamp("us", tz="UTC")))
        return schema

    def _do(self, what: str, action, other: "Folder | None" = None):
        try:
            return action()
        except SqlextError:
            raise
        except FileNotFoundError as error:
            if what == "read":  # a file that is not there, which its readers may expect (read_json)
                raise
            # a folder that cannot be made (its parent cannot hold one): the store's failure too
            raise storage_error(what, self if other is None else f"{self} to {other}", error) from error
        except Exception as error:  # noqa: BLE001 - the store's own failure, named with the path
            raise storage_error(what, self if other is None else f"{self} to {other}", error) from error


def read_parquet(files: Sequence[Folder], schema: pa.Schema, columns=None, filter=None) -> pa.Table:
    """The rows of Parquet files (one store) in the columns ``schema`` names, each file read with
    that schema; only ``columns``, and only the rows ``filter`` (an Arrow expression) keeps,
    pushed into the reader where the store is read through Arrow."""
    if not files:
        table = schema.empty_table()
        return table if columns is None else table.select(columns)
    io = files[0].io
    try:
        return io.read_parquet([f.path for f in files], schema, columns, filter)
    except SqlextError:
        raise
    except Exception as error:  # noqa: BLE001 - the store's own failure
        raise storage_error("read", files[0], error) from error


def parquet_slices(files: Sequence[Folder], schema: pa.Schema, rows: int = 1 << 20, where=None) -> Iterator[pa.Table]:
    """The rows of Parquet files as :func:`read_parquet` reads them, a slice of about ``rows``
    rows at a time (all at once where the store is read through the JVM); only those ``where``
    (an Arrow expression) keeps, where it is given."""
    if not files:
        return
    io = files[0].io
    try:
        yield from io.parquet_slices([f.path for f in files], schema, rows, where)
    except SqlextError:
        raise
    except Exception as error:  # noqa: BLE001 - the store's own failure
        raise storage_error("read", files[0], error) from error


def storage_error(what: str, path, error: BaseException) -> SqlextError:
    cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    for marker in ("java.io.", "org.apache.hadoop."):
        if marker in str(error):  # a py4j error: the Java exception's own line says it best
            line = next((l.strip() for l in str(error).splitlines() if marker in l), cause)
            cause = line.split(": ", 1)[-1] if ": " in line else line
            break
    return SqlextError("STORAGE_ERROR", function=FUNCTION, what=what, path=str(path), cause=cause[:400])


def folder_bytes(folder: Folder) -> int:
    """The bytes of the files under ``folder`` (0 where it does not exist)."""
    total = 0
    for entry in folder.entries():
        total += folder_bytes(folder / entry.name) if entry.is_dir else entry.size
    return total


def walk_files(folder: Folder) -> Iterator[Folder]:
    """Every file under ``folder``."""
    for entry in folder.entries():
        if entry.is_dir:
            yield from walk_files(folder / entry.name)
        else:
            yield folder / entry.name


def _join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name
