"""Where sqlext keeps its files: every read, write, listing, rename and delete of
a checkpoint, a state layer, a source folder or an output folder goes through this module.

A path a user gives is a URI that Spark's Hadoop ``FileSystem`` resolves (``s3a://``,
``abfss://``, ``gs://``, ``hdfs://``, ``viewfs://``, ``file:``, or a plain local path), with
the configuration and credentials the user gave Spark. :func:`resolve` asks the session's
Hadoop ``FileSystem`` for the path, follows mount tables (``viewfs``) to the store that holds
it, and then does the work where it is quickest:

* through ``pyarrow.fs`` for a store pyarrow opens: the local disk (``file``), and S3, GCS or
  Azure where pyarrow, given the same endpoint and keys as Hadoop, sees the same folder (checked
  on the folder's bucket or container when it is resolved; Azure where Hadoop's settings give a
  credential pyarrow takes, :func:`azure_account`). Arrow data is then read and written without the
  JVM, and the same :class:`Folder` can travel to Spark's Python workers;
* through the JVM's Hadoop ``FileSystem`` otherwise (HDFS without libhdfs, any scheme only a
  Hadoop connector knows): bytes cross py4j, which is slower but reads and writes exactly what
  Spark would. ``spark.sqlext.storage.io`` forces ``arrow`` or ``hadoop``.

Spark itself (reading a layer as a frame, writing files with a Spark plan) is given
:attr:`Folder.uri`, the URI as the user wrote it, so it resolves it the same way.

Atomic layers. A state layer or an output file must appear whole or not at all. Where the store
renames atomically (a local disk, HDFS, and ``viewfs`` onto them), a layer is written under a
temporary name and renamed into place; its name appearing is its commit. Object stores (S3,
GCS, Azure Blob) have no atomic rename: there a layer is written in place and a commit file,
written last, makes it visible; a reader ignores a layer without one
(:meth:`Folder.committed`). A single file (a JSON record, one Parquet file) appears whole on
both: renamed from a temporary name, or put as one object.

Storage failures (a missing scheme, no permission, an unreachable store) are
``[STORAGE_ERROR]``, naming the path and the cause.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Iterator, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa

from sqlext.errors import SqlextError

FUNCTION = "sqlext stream"
IO_SETTING = "spark.sqlext.storage.io"
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


class Folder:
    """A file or folder: :attr:`uri` for Spark, and the path in the store that reads and writes
    it for sqlext. Children are made with ``folder / "name"``."""

    def __init__(self, uri: str, io: "_IO", path: str):
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
        import pyarrow.parquet as pq

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
        except FileNotFoundError:
            raise
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


def parquet_slices(files: Sequence[Folder], schema: pa.Schema, rows: int = 1 << 20) -> Iterator[pa.Table]:
    """The rows of Parquet files as :func:`read_parquet` reads them, a slice of about ``rows``
    rows at a time (all at once where the store is read through the JVM)."""
    if not files:
        return
    io = files[0].io
    try:
        yield from io.parquet_slices([f.path for f in files], schema, rows)
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


# -- resolving a URI

_RESOLVED: dict[tuple, Folder] = {}


def resolve(spark, uri: str | Folder) -> Folder:
    """The folder or file ``uri`` names, resolved through the session's Hadoop ``FileSystem``
    (mount tables followed); see the module's docstring for how it is then read and written."""
    if isinstance(uri, Folder):
        return uri
    uri = str(uri)
    forced = spark.conf.get(IO_SETTING, "auto").lower()
    key = (uri, forced, id(spark._jsc))
    found = _RESOLVED.get(key)
    if found is not None:
        return found
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    try:
        path = _hadoop_path(jvm, uri)
        fs = path.getFileSystem(conf)
        qualified = fs.makeQualified(path)
        target = _target(jvm, fs, qualified)
        target_fs = target.getFileSystem(conf)
    except Exception as error:  # noqa: BLE001 - no such scheme, a bad URI, an unreachable store
        raise storage_error("resolve", uri, error) from None
    shown = qualified.toString()
    target_uri = target.toString()
    io = None if forced == "hadoop" else _arrow_io(target_uri, conf)
    if io is None:
        if forced == "arrow":
            raise SqlextError("STORAGE_ERROR", function=FUNCTION, what="open with pyarrow", path=uri,
                              cause=f"pyarrow opens no store for {target_uri}; unset {IO_SETTING}")
        io, path_in_store = _HadoopIO(jvm, target_fs, conf), target_uri
    else:
        path_in_store = _arrow_path(target_uri)
    folder = Folder(shown, io, path_in_store)
    _RESOLVED[key] = folder
    return folder


def decoded(spark, uri: str) -> str:
    """A URI whose characters are escaped (``ware%20house``, as Spark's catalog gives a
    database's location) as the path string Hadoop and :func:`resolve` take."""
    jvm = spark._jvm
    return _hadoop_path(jvm, jvm.java.net.URI(uri)).toString()


def local(path) -> Folder:
    """A folder on this machine's disk, given as a plain path (for tools and tests that run
    without Spark)."""
    import pyarrow.fs as pafs

    from os.path import abspath

    absolute = abspath(str(path))
    return Folder("file:" + absolute, _ArrowIO(pafs.LocalFileSystem(), True), absolute)


def _target(jvm, fs, qualified):
    """The path in the store that holds ``qualified``: a mount table (``viewfs``) followed to its
    target. Only a path that exists resolves, so the deepest existing ancestor is resolved and
    the rest appended."""
    rest = []
    current = qualified
    while current is not None:
        try:
            if fs.exists(current):
                resolved = fs.resolvePath(current)
                for name in reversed(rest):
                    resolved = _hadoop_path(jvm, resolved, name)
                return resolved
        except Exception:  # noqa: BLE001 - an internal folder of a mount table: go up
            pass
        rest.append(current.getName())
        current = current.getParent()
    return qualified


def _hadoop_path(jvm, *parts):
    """A Hadoop ``Path`` in the JVM."""
    constructor = jvm.org.apache.hadoop.fs.Path
    return constructor(*parts)


def _join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def _arrow_path(uri: str) -> str:
    """The path pyarrow's file system for ``uri``'s store takes: a local path, or the bucket
    (an Azure container) and the key."""
    parsed = urlparse(uri)
    if parsed.scheme in ("file", ""):
        return unquote(parsed.path)
    if parsed.scheme.lower() in AZURE:  # container@account.dfs.core.windows.net
        return unquote(parsed.netloc.split("@", 1)[0] + parsed.path)
    return unquote(parsed.netloc + parsed.path)


def _arrow_io(uri: str, conf) -> "_IO | None":
    """An Arrow file system for the store ``uri`` is in, where pyarrow opens it and sees there
    what Hadoop sees; None otherwise."""
    import pyarrow.fs as pafs

    scheme = urlparse(uri).scheme.lower()
    if scheme in ("file", ""):
        return _ArrowIO(pafs.LocalFileSystem(), True)
    try:
        if scheme in ("s3a", "s3", "s3n"):
            fs = _s3(urlparse(uri).netloc, conf)
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
        fs.get_file_info(_arrow_path(uri).split("/", 1)[0] or "/")
    except Exception:  # noqa: BLE001 - pyarrow cannot open or reach it: Hadoop will
        return None
    return _ArrowIO(fs, scheme in ATOMIC_RENAME)


def s3a_setting(conf, bucket: str, name: str) -> str | None:
    """Hadoop's s3a setting ``name`` for ``bucket`` (its per-bucket value first)."""
    return conf.get(f"fs.s3a.bucket.{bucket}.{name}") or conf.get(f"fs.s3a.{name}")


# Azure's schemes in Hadoop (ABFS, and the older WASB) and the protocol each speaks by default
AZURE = {"abfs": "https", "abfss": "https", "wasb": "http", "wasbs": "https"}


def azure_account(host: str, conf) -> dict | None:
    """The storage account at ``host`` (``<account>.dfs.core.windows.net``, or ``.blob.`` for
    WASB) and the credential Hadoop's settings give for it, as pyarrow's ``AzureFileSystem``
    takes them: a shared key, a fixed SAS token, an OAuth client secret, or a managed identity.
    None where the settings name a credential pyarrow has no form of (a custom token
    provider): Hadoop's connector keeps that store. A setting for the account's host comes
    before the one for every account, as in Hadoop.

    >>> azure_account("lake.dfs.core.windows.net", {"fs.azure.account.key.lake.dfs.core.windows.net": "k"})
    {'account_name': 'lake', 'account_key': 'k', 'dfs_storage_authority': '.dfs.core.windows.net', \
'blob_storage_authority': '.blob.core.windows.net'}
    """
    def setting(name):
        return conf.get(f"fs.azure.{name}.{host}") or conf.get(f"fs.azure.{name}")

    account, dot, domain = host.partition(".")
    service, _, cloud = domain.partition(".")
    if not (account and dot and service in ("dfs", "blob") and cloud):
        return None
    found = {"account_name": account}
    auth = (setting("account.auth.type") or "SharedKey").lower()
    if auth == "sharedkey" and setting("account.key"):
        found["account_key"] = setting("account.key")
    elif auth == "sas" and setting("sas.fixed.token") and not setting("sas.token.provider.type"):
        # Hadoop prefers a SAS token provider to the fixed token when both are set
        found["sas_token"] = setting("sas.fixed.token").lstrip("?")
    elif auth == "oauth":
        provider = (setting("account.oauth.provider.type") or "").rpartition(".")[2]
        client = setting("account.oauth2.client.id")
        if provider == "ClientCredsTokenProvider":
            secret = setting("account.oauth2.client.secret")
            tenant = _azure_tenant(setting("account.oauth2.client.endpoint") or "")
            if not (client and secret and tenant):
                return None
            found.update(client_id=client, client_secret=secret, tenant_id=tenant)
        elif provider == "MsiTokenProvider":
            if client:  # a user-assigned identity; else the machine's own
                found["client_id"] = client
        else:
            return None
    else:
        return None
    found.update(dfs_storage_authority=f".dfs.{cloud}", blob_storage_authority=f".blob.{cloud}")
    return found


def _azure_tenant(endpoint: str) -> str | None:
    """The tenant of an OAuth token endpoint (``https://login.microsoftonline.com/<tenant>/oauth2/token``)."""
    parts = urlparse(endpoint).path.strip("/").split("/")
    return parts[0] if len(parts) >= 2 and parts[1] == "oauth2" and parts[0] else None


def _s3(bucket: str, conf):
    """pyarrow's S3 with the endpoint and keys Hadoop's s3a has for ``bucket``."""
    import pyarrow.fs as pafs

    def setting(name):
        return s3a_setting(conf, bucket, name)

    options = {}
    if setting("access.key"):
        options.update(access_key=setting("access.key"), secret_key=setting("secret.key"),
                       session_token=setting("session.token"))
    if setting("endpoint"):
        endpoint = setting("endpoint")
        options["endpoint_override"] = endpoint
        options["scheme"] = "http" if endpoint.startswith("http:") or setting("connection.ssl.enabled") == "false" \
            else "https"
    if setting("endpoint.region"):
        options["region"] = setting("endpoint.region")
    if setting("path.style.access") == "true":
        options["force_virtual_addressing"] = False
    return pafs.S3FileSystem(**options)


# -- the two ways of doing it

class _IO:
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

    def parquet_slices(self, paths, schema, rows) -> Iterator[pa.Table]: ...


def _parquet_format():
    """Parquet as sqlext reads it: Spark's INT96 timestamps in microseconds, as Spark reads them
    (Arrow's default, nanoseconds, cannot hold every instant Spark can)."""
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


class _ArrowIO(_IO):
    """A store through ``pyarrow.fs``: no JVM, so it also works in Spark's Python workers."""

    streams = True

    def __init__(self, fs, atomic_rename: bool):
        self.fs, self.atomic_rename = fs, atomic_rename

    def __reduce__(self):
        return _ArrowIO, (self.fs, self.atomic_rename)

    def store_uri(self, path):
        # pyarrow's paths are a local path, or the bucket and key of an object store
        scheme = {"local": "file://", "s3": "s3://", "gcs": "gs://"}.get(self.fs.type_name)
        return None if scheme is None else scheme + path

    def kind(self, path):
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(path)
        return None if info.type == pafs.FileType.NotFound else "dir" if info.type == pafs.FileType.Directory \
            else "file"

    def entries(self, path):
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [Entry(info.base_name, info.type == pafs.FileType.Directory, info.size or 0, info.mtime_ns or 0)
                for info in infos]

    def mkdirs(self, path):
        self.fs.create_dir(path, recursive=True)

    def delete(self, path):
        import pyarrow.fs as pafs

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
        import pyarrow.parquet as pq

        with self.fs.open_input_file(path) as handle:
            return pq.read_metadata(handle)

    def read_parquet(self, paths, schema, columns, filter):
        import pyarrow.dataset as ds

        return ds.dataset(list(paths), schema=schema, format=_parquet_format(), filesystem=self.fs) \
            .to_table(columns=columns, filter=filter)

    def parquet_slices(self, paths, schema, rows):
        import pyarrow.dataset as ds

        for batch in ds.dataset(list(paths), schema=schema, format=_parquet_format(), filesystem=self.fs) \
                .to_batches(batch_size=rows):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


class _HadoopIO(_IO):
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
        return _hadoop_path(self.jvm, path)

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
        import pyarrow.parquet as pq

        return pq.read_metadata(pa.BufferReader(self.read(path)))

    def read_parquet(self, paths, schema, columns, filter):
        import pyarrow.parquet as pq

        tables = []
        for path in paths:
            table = pq.read_table(pa.BufferReader(self.read(path)), coerce_int96_timestamp_unit="us")
            tables.append(pa.table([table[f.name].cast(f.type) for f in schema], schema=schema))
        table = pa.concat_tables(tables)
        if filter is not None:
            table = table.filter(filter)
        return table if columns is None else table.select(columns)

    def parquet_slices(self, paths, schema, rows):
        yield self.read_parquet(paths, schema, None, None)


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
