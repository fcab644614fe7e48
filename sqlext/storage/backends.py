"""The two ways sqlext reaches a store, each doing what :class:`~sqlext.storage.folder.StoreIO`
asks: through ``pyarrow.fs`` (:class:`ArrowIO`; no JVM) and through the JVM's Hadoop
``FileSystem`` (:class:`HadoopIO`); and which store pyarrow opens for a URI
(:func:`arrow_io_for`), with the credentials Hadoop's settings give
(:mod:`sqlext.storage.credentials`)."""

from __future__ import annotations

from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sqlext.errors import SqlextError
from sqlext.storage.credentials import AZURE, azure_account, s3_filesystem
from sqlext.storage.folder import ATOMIC_RENAME, FUNCTION, Entry, StoreIO


def hadoop_path(jvm, *parts):
    """A Hadoop ``Path`` in the JVM."""
    constructor = jvm.org.apache.hadoop.fs.Path
    return constructor(*parts)


def arrow_path(uri: str) -> str:
    """The path pyarrow's file system for ``uri``'s store takes: a local path, or the bucket
    (an Azure container) and the key."""
    parsed = urlparse(uri)
    if parsed.scheme in ("file", ""):
        return unquote(parsed.path)
    if parsed.scheme.lower() in AZURE:  # container@account.dfs.core.windows.net
        return unquote(parsed.netloc.split("@", 1)[0] + parsed.path)
    return unquote(parsed.netloc + parsed.path)


def arrow_io_for(uri: str, conf) -> StoreIO | None:
    """An Arrow file system for the store ``uri`` is in, where pyarrow opens it and sees there
    what Hadoop sees; None otherwise."""
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("file", ""):
        return ArrowIO(pafs.LocalFileSystem(), True)
    try:
        if scheme in ("s3a", "s3", "s3n"):
            fs = s3_filesystem(urlparse(uri).netloc, conf)
        elif scheme in ("gs", "gcs"):
            fs = pafs.GcsFileSystem()
        elif scheme in AZURE:
            account = azure_account(urlparse(uri).netloc.rpartition("@")[2], conf)
            if account is None:
                return None
            fs = pafs.AzureFileSystem(**account, dfs_storage_scheme=AZURE[scheme],
                                      blob_storage_scheme=AZURE[scheme])
        elif scheme == "hdfs":
            parsed = urlparse(uri)
            fs = pafs.HadoopFileSystem(parsed.hostname or "default", parsed.port or 0)
        else:
            return None
        fs.get_file_info(arrow_path(uri).split("/", 1)[0] or "/")
    except Exception:  # noqa: BLE001 - pyarrow cannot open or reach it: Hadoop will
        return None
    return ArrowIO(fs, scheme in ATOMIC_RENAME)


def _parquet_format():
    """Parquet as sqlext reads it: Spark's INT96 timestamps in microseconds, as Spark reads them
    (Arrow's default, nanoseconds, cannot hold every instant Spark can)."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


class ArrowIO(StoreIO):
    """A store through ``pyarrow.fs``: no JVM, so it also works in Spark's Python workers."""

    streams = True

    def __init__(self, fs, atomic_rename: bool):
        self.fs, self.atomic_rename = fs, atomic_rename

    def __reduce__(self):
        return ArrowIO, (self.fs, self.atomic_rename)

    def store_uri(self, path):
        # pyarrow's paths are a local path, or the bucket and key of an object store
        scheme = {"local": "file://", "s3": "s3://", "gcs": "gs://"}.get(self.fs.type_name)
        return None if scheme is None else scheme + path

    def kind(self, path):
        info = self.fs.get_file_info(path)
        return None if info.type == pafs.FileType.NotFound else "dir" if info.type == pafs.FileType.Directory \
            else "file"

    def entries(self, path):
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [Entry(info.base_name, info.type == pafs.FileType.Directory, info.size or 0, info.mtime_ns or 0)
                for info in infos]

    def mkdirs(self, path):
        self.fs.create_dir(path, recursive=True)

    def delete(self, path):
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(path)

    def rename(self, source, target):
        self.fs.move(source, target)

    def read(self, path):
        with self.fs.open_input_stream(path) as stream:
            return stream.read()

    def write(self, path, data):
        with self.fs.open_output_stream(path) as stream:
            stream.write(data)

    def parquet_metadata(self, path):
        with self.fs.open_input_file(path) as handle:
            return pq.read_metadata(handle)

    def read_parquet(self, paths, schema, columns, filter):
        return ds.dataset(list(paths), schema=schema, format=_parquet_format(), filesystem=self.fs) \
            .to_table(columns=columns, filter=filter)

    def parquet_slices(self, paths, schema, rows, where=None):
        for batch in ds.dataset(list(paths), schema=schema, format=_parquet_format(), filesystem=self.fs) \
                .to_batches(batch_size=rows, filter=where):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


class HadoopIO(StoreIO):
    """A store through the JVM's Hadoop ``FileSystem`` (on the driver): whatever Spark reads."""

    streams = False

    def __init__(self, jvm, fs, conf):
        self.jvm, self.fs, self.conf = jvm, fs, conf
        scheme = str(fs.getScheme()).lower()
        self.atomic_rename = scheme in ATOMIC_RENAME

    def __reduce__(self):
        raise SqlextError("STORAGE_ERROR", function=FUNCTION, what="send to Spark's workers",
                          path=str(self.fs.getUri()),
                          cause="the store is read through the driver's JVM, which workers do not have")

    def _path(self, path):
        return hadoop_path(self.jvm, path)

    def store_uri(self, path):
        return path  # the target's whole URI, as Hadoop qualified it

    def kind(self, path):
        p = self._path(path)
        if not self.fs.exists(p):
            return None
        return "dir" if self.fs.getFileStatus(p).isDirectory() else "file"

    def entries(self, path):
        p = self._path(path)
        if not self.fs.exists(p):
            return []
        return [Entry(s.getPath().getName(), s.isDirectory(), s.getLen(), s.getModificationTime() * 1_000_000)
                for s in self.fs.listStatus(p)]

    def mkdirs(self, path):
        self.fs.mkdirs(self._path(path))

    def delete(self, path):
        self.fs.delete(self._path(path), True)

    def rename(self, source, target):
        if not self.fs.rename(self._path(source), self._path(target)):
            raise OSError(f"the store refused to rename {source} to {target}")

    def read(self, path):
        p = self._path(path)
        if not self.fs.exists(p):
            raise FileNotFoundError(path)
        stream = self.fs.open(p)
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, path, data):
        stream = self.fs.create(self._path(path), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def parquet_metadata(self, path):
        return pq.read_metadata(pa.BufferReader(self.read(path)))

    def read_parquet(self, paths, schema, columns, filter):
        tables = []
        for path in paths:
            table = pq.read_table(pa.BufferReader(self.read(path)), coerce_int96_timestamp_unit="us")
            tables.append(pa.table([table[f.name].cast(f.type) for f in schema], schema=schema))
        table = pa.concat_tables(tables)
        if filter is not None:
            table = table.filter(filter)
        return table if columns is None else table.select(columns)

    def parquet_slices(self, paths, schema, rows, where=None):
        yield self.read_parquet(paths, schema, None, where)
