"""Where sqlext keeps its files: every read, write, listing, rename and delete of
a checkpoint, a state layer, a source folder or an output folder goes through this package.

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

from os.path import abspath

import pyarrow.fs as pafs

from sqlext.errors import SqlextError
from sqlext.storage.backends import ArrowIO, HadoopIO, arrow_io_for, arrow_path, hadoop_path
from sqlext.storage.folder import (ATOMIC_RENAME, COMMIT_SUFFIX, FUNCTION, PENDING_PREFIX, Entry, Folder, StoreIO,
                                   folder_bytes, parquet_slices, read_parquet, storage_error, walk_files)

__all__ = ["ATOMIC_RENAME", "COMMIT_SUFFIX", "FUNCTION", "IO_SETTING", "PENDING_PREFIX", "Entry", "Folder", "StoreIO",
           "decoded", "folder_bytes", "local", "parquet_slices", "read_parquet", "resolve", "storage_error",
           "walk_files"]

IO_SETTING = "spark.sqlext.storage.io"

# -- resolving a URI

_RESOLVED: dict[tuple, Folder] = {}


def resolve(spark, uri: str | Folder) -> Folder:
    """The folder or file ``uri`` names, resolved through the session's Hadoop ``FileSystem``
    (mount tables followed); see the package's docstring for how it is then read and written."""
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
        path = hadoop_path(jvm, uri)
        fs = path.getFileSystem(conf)
        qualified = fs.makeQualified(path)
        target = _target(jvm, fs, qualified)
        target_fs = target.getFileSystem(conf)
    except Exception as error:  # noqa: BLE001 - no such scheme, a bad URI, an unreachable store
        raise storage_error("resolve", uri, error) from None
    shown = qualified.toString()
    target_uri = target.toString()
    io = None if forced == "hadoop" else arrow_io_for(target_uri, conf)
    if io is None:
        if forced == "arrow":
            raise SqlextError("STORAGE_ERROR", function=FUNCTION, what="open with pyarrow", path=uri,
                              cause=f"pyarrow opens no store for {target_uri}; unset {IO_SETTING}")
        io, path_in_store = HadoopIO(jvm, target_fs, conf), target_uri
    else:
        path_in_store = arrow_path(target_uri)
    folder = Folder(shown, io, path_in_store)
    _RESOLVED[key] = folder
    return folder


def decoded(spark, uri: str) -> str:
    """A URI whose characters are escaped (``ware%20house``, as Spark's catalog gives a
    database's location) as the path string Hadoop and :func:`resolve` take."""
    jvm = spark._jvm
    return hadoop_path(jvm, jvm.java.net.URI(uri)).toString()


def local(path) -> Folder:
    """A folder on this machine's disk, given as a plain path (for tools and tests that run
    without Spark)."""
    absolute = abspath(str(path))
    return Folder("file:" + absolute, ArrowIO(pafs.LocalFileSystem(), True), absolute)


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
                    resolved = hadoop_path(jvm, resolved, name)
                return resolved
        except Exception:  # noqa: BLE001 - an internal folder of a mount table: go up
            pass
        rest.append(current.getName())
        current = current.getParent()
    return qualified
