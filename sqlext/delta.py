"""Delta tables' change data feeds, read as sqlext's change rows.

A Delta table whose change data feed is on (``delta.enableChangeDataFeed``) records, for every
commit, the rows it inserted, updated (before and after) and deleted: the table's columns,
``_change_type`` and ``_commit_version``, which is sqlext's shape already. Its third column,
``_commit_timestamp``, is left out: it is the time of the commit ``_commit_version`` names, so
it orders nothing the version does not, and as a data column it would make every update look
like a change of the row (the old row's time differs from the new one's).

A statement names a Delta table by its path, in Spark's spelling ``delta.`/data/accounts```,
or as a folder source holding ``_delta_log``. The path is a user path: :mod:`sqlext.storage`
resolves it (a mount table followed) and the store's own URI is what is opened.

Where Spark has Delta Lake on its classpath (the ``io.delta`` classes load), Spark's own reader
reads the feed (``readChangeFeed``). Elsewhere (the embedded session: Spark's Delta jars come
from Maven) the ``deltalake`` package (delta-rs, no JVM) reads it on the driver, as Arrow.

- Batch: :func:`with_change_feeds` registers, before a statement is rewritten, a temporary
  view for each ``TABLE(delta.`path`)`` argument of a table function (the whole feed) and each
  ``table_changes('path', start[, end])`` (the commits from ``start`` to ``end``).
- Incremental: :meth:`DeltaChanges.stage` writes the commits after the last one a checkpoint
  has, one Parquet file of change rows per commit, into a folder of the checkpoint, and records
  the version; the run then reads that folder as any folder of change files, so Spark's file
  source makes the run exactly once (:mod:`sqlext.streaming.sources`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema
from sqlglot import exp

from sqlext.functions.changes import CHANGE_TYPE, DEFAULT_ORDER_BY, DELETE, INSERT
from sqlext.errors import SqlextError
from sqlext.language.dialect import SparkExt, TableArgument, parse_one, to_sql
from sqlext.storage import Folder, resolve
from sqlext.storage.credentials import AZURE, azure_account, s3a_setting
from sqlext.udfs.column_wise import row_codes, run_starts

COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_FEED_SETTING = "delta.enableChangeDataFeed"
TABLE_CHANGES = "TABLE_CHANGES"
# in a checkpoint: the commits staged for the runs, a folder per table
STAGED_FOLDER = "sqlext-delta"
OFFSET_FILE = "_sqlext_delta_offset.json"  # '_': Spark's file source does not read it
STAGE_COMMITS = 100  # commits read at a time while staging: a first run over a long history stays bounded
_views = itertools.count(1)


def path_of(name: exp.Expression) -> str | None:
    """The path of a Delta table named by its path, ``delta.`/data/t``` (a table, or a column
    as it stands inside ``STREAM(...)``); None for any other name.

    >>> from sqlext.language.dialect import parse_one
    >>> path_of(parse_one("SELECT * FROM delta.`/data/t`").find(exp.Table))
    '/data/t'
    >>> path_of(parse_one("SELECT * FROM db.t").find(exp.Table)) is None
    True
    """
    if isinstance(name, exp.Table) and not name.args.get("catalog") and isinstance(name.this, exp.Identifier):
        return name.name if name.db.lower() == "delta" else None
    if isinstance(name, exp.Column) and not name.args.get("db") and isinstance(name.this, exp.Identifier):
        return name.name if name.table.lower() == "delta" else None
    return None


def is_delta_table(folder: Folder) -> bool:
    """Whether a folder holds a Delta table (its ``_delta_log``)."""
    try:
        return (folder / "_delta_log").is_dir()
    except SqlextError:
        return False


def spark_reads_delta(spark) -> bool:
    """Whether the session's Spark has Delta Lake: its classes load in the driver's JVM."""
    try:
        jvm = spark._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", False, loader)
        return True
    except Exception:  # noqa: BLE001 - no JVM here (Spark Connect), or no Delta Lake in it
        return False


class DeltaChanges:
    """The change data feed of one Delta table, read through ``deltalake``."""

    def __init__(self, spark, path: str, function: str):
        self.path, self.function = path, function
        self._module = _deltalake(path, function)
        if getattr(spark, "_jvm", None) is None:  # Spark Connect: no Hadoop here to resolve the path with
            self.uri, self.options = _location(path, path, function, {})
        else:
            self.uri, self.options = store_location(spark, resolve(spark, path), path, function)
        self._table = None

    def _open(self):
        try:
            self._table = self._module.DeltaTable(self.uri, storage_options=self.options or None)
        except Exception as error:  # noqa: BLE001 - deltalake's own errors: no table there, no access
            raise self.unreadable(_first_line(error), "Give the folder that holds the table's _delta_log.") from None
        return self._table

    def unreadable(self, cause: str, fix: str) -> SqlextError:
        return SqlextError("DELTA_CHANGES_UNREADABLE", function=self.function, path=self.path, cause=cause, fix=fix)

    def version(self) -> int:
        """The table's latest version (read again on every call)."""
        return self._open().version()

    def schema(self) -> pa.Schema:
        """The columns of its change rows: the table's, ``_change_type``, ``_commit_version``."""
        table = self._table or self._open()
        if str(table.metadata().configuration.get(CHANGE_FEED_SETTING, "false")).lower() != "true":
            raise self.unreadable(
                f"its change data feed is off ({CHANGE_FEED_SETTING} is not true)",
                f"Turn it on ({CHANGE_FEED_SETTING} = true in the table's properties: ALTER TABLE ... SET "
                "TBLPROPERTIES in Spark, DeltaTable(path).alter.set_table_properties in deltalake); the feed holds "
                "the commits made after that.")
        columns = pa.schema(table.schema().to_arrow())
        return pa.schema([*columns, pa.field(CHANGE_TYPE, pa.string()), pa.field(DEFAULT_ORDER_BY, pa.int64())])

    def changes(self, start: int, end: int | None = None, schema: pa.Schema | None = None) -> pa.Table:
        """The change rows of the commits ``start`` to ``end`` (both included; the latest when
        None), in the columns of ``schema`` (:meth:`schema` by default)."""
        table = self._table or self._open()
        schema = schema or self.schema()
        try:
            rows = pa.table(table.load_cdf(starting_version=start, ending_version=end).read_all())
        except Exception as error:  # noqa: BLE001 - deltalake's own errors
            raise self.unreadable(_first_line(error), "Check that the feed was on for these versions and that "
                                  "their files are still there (not vacuumed).") from None
        return unchanged_rows_cancelled(pa.table([rows[f.name].cast(f.type) for f in schema], schema=schema))

    def stage(self, staging: Folder, schema: pa.Schema) -> None:
        """Write the commits after the last one staged in ``staging`` as Parquet files of change
        rows in ``schema`` (``commit-<version>.parquet``, one per commit that changed rows), then
        record the latest version there. A run killed before the record is written stages the
        same commits again next time, leaving the files already there as they are."""
        record = staging / OFFSET_FILE
        done = (record.read_json() or {}).get("version", -1)
        latest = self.version()
        if latest < done:
            raise self.unreadable(f"its latest version is {latest}, but earlier runs read its commits up to {done}, so "
                                  "it was replaced", "Start over with a new checkpoint and output folder.")
        if latest == done:
            return
        for first in range(done + 1, latest + 1, STAGE_COMMITS):  # a bounded read at a time
            rows = self.changes(first, min(first + STAGE_COMMITS - 1, latest), schema)
            versions = rows.column(DEFAULT_ORDER_BY)
            for version in sorted(pc.unique(versions).to_pylist()):
                file = staging / f"commit-{version:020d}.parquet"
                if not file.exists():
                    file.write_parquet(rows.filter(pc.equal(versions, version)))
        record.write_json({"table": self.uri, "version": latest})

    def staging_name(self) -> str:
        """The name of this table's folder of staged commits in a checkpoint."""
        return hashlib.sha1(self.uri.encode()).hexdigest()[:16]


def unchanged_rows_cancelled(rows: pa.Table) -> pa.Table:
    """Change rows of Delta commits without the rows a commit removed and added unchanged.

    A commit without change data files (``_change_data``: a writer leaves them out where the
    commit only removes and adds whole files, as an overwrite, or where an update changed
    nothing, as deltalake's update that sets a value a row already has) has as its changes, by
    Delta's protocol, the rows of the files it removed as deletes and of the files it added as
    inserts. A file rewritten that way adds again every row it did not change, so a delete and
    an insert of one commit with equal rows are no change: they cancel, as a multiset
    difference (of two equal rows deleted and one inserted, one delete is left), and the rows of
    a commit that changed nothing cancel to none.

    >>> rows = pa.table({"id": [1, 1, 2, 2, 3], "v": [5, 5, 7, 8, 4],
    ...                  "_change_type": ["insert", "delete", "insert", "delete", "delete"],
    ...                  "_commit_version": [1, 1, 1, 1, 1]})
    >>> unchanged_rows_cancelled(rows).to_pylist()  # doctest: +NORMALIZE_WHITESPACE
    [{'id': 2, 'v': 7, '_change_type': 'insert', '_commit_version': 1},
     {'id': 2, 'v': 8, '_change_type': 'delete', '_commit_version': 1},
     {'id': 3, 'v': 4, '_change_type': 'delete', '_commit_version': 1}]
    """
    kinds = rows[CHANGE_TYPE]
    inserts = np.asarray(pc.fill_null(pc.equal(kinds, INSERT), False), dtype=bool)
    deletes = np.asarray(pc.fill_null(pc.equal(kinds, DELETE), False), dtype=bool)
    if not (inserts.any() and deletes.any()):
        return rows
    candidates = np.flatnonzero(inserts | deletes)
    taken = pa.array(candidates)
    # one code per (commit, row) and side: the deletes of a row, then its inserts
    row = row_codes([rows[c].take(taken) for c in rows.column_names if c != CHANGE_TYPE])
    side = inserts[candidates].astype(np.int64)
    group = row * 2 + side
    order = np.argsort(group, kind="stable")
    at = np.arange(len(order))
    place = at - np.maximum.accumulate(np.where(run_starts(group[order]), at, 0))  # within its (row, side)
    counts = np.bincount(group, minlength=2 * (int(row.max()) + 1))
    cancelled = place < counts[(row * 2 + 1 - side)[order]]  # matched by as many of the other side
    if not cancelled.any():
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[candidates[order[cancelled]]] = False
    return rows.filter(pa.array(keep))


def changes_frame(spark, path: str, start: int = 0, end: int | None = None, function: str = TABLE_CHANGES):
    """The change rows of a Delta table's commits ``start`` to ``end`` (the latest when None),
    as a DataFrame: read by Spark where it has Delta Lake, else by deltalake into Arrow."""
    if spark_reads_delta(spark):
        reader = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", str(start))
        if end is not None:
            reader = reader.option("endingVersion", str(end))
        return reader.load(resolve(spark, path).uri).drop(COMMIT_TIMESTAMP)
    feed = DeltaChanges(spark, path, function)
    latest = feed.version()
    if start > latest or (end is not None and not start <= end <= latest):
        raise feed.unreadable(f"there are no versions {start} to {'the latest' if end is None else end} (its "
                              f"latest is {latest})", f"Give versions from 0 to {latest}, the first not after the last.")
    schema = feed.schema()
    return spark.createDataFrame(feed.changes(start, end, schema), schema=from_arrow_schema(schema))


def with_change_feeds(spark, text: str, function: str) -> tuple[str, list[str]]:
    """``text`` with every Delta change feed it reads replaced by a temporary view of its rows,
    and the views (for the caller to drop): a ``TABLE(delta.`path`)`` argument of a table
    function (the whole feed) and ``table_changes('path', start[, end])`` (the commits from
    ``start`` to ``end``; the path also as ``'delta.`path`'``). Text without them, or that
    does not parse, comes back as it is."""
    lowered = text.lower()
    if "delta" not in lowered and "table_changes" not in lowered:
        return text, []
    try:
        tree = parse_one(text)
    except Exception:  # noqa: BLE001 - the runner reports text that does not parse
        return text, []
    views: list[str] = []
    try:
        for table in list(tree.find_all(exp.Table)):
            if isinstance(table.this, exp.Anonymous) and table.this.name.upper() == TABLE_CHANGES:
                frame = changes_frame(spark, *_table_changes_arguments(table.this))
            elif isinstance(table.parent, TableArgument) and path_of(table) is not None:
                frame = changes_frame(spark, path_of(table), 0, None, function)
            else:
                continue
            view = f"__sx_delta_{next(_views)}"
            frame.createOrReplaceTempView(view)
            views.append(view)
            replacement = exp.Table(this=exp.to_identifier(view))
            for key in ("alias", "joins", "laterals", "pivots"):  # what the name carried stays with it
                if table.args.get(key):
                    replacement.set(key, table.args[key])
            table.replace(replacement)
    except BaseException:
        for view in views:
            spark.catalog.dropTempView(view)
        raise
    return (to_sql(tree) if views else text), views


def _table_changes_arguments(call: exp.Anonymous) -> tuple[str, int, int | None]:
    """The path, first and last version of ``table_changes('path', start[, end])``."""
    arguments = call.expressions
    usage = "Write table_changes('/data/accounts', 1) or table_changes('delta.`/data/accounts`', 1, 5)."
    if len(arguments) not in (2, 3) or not (isinstance(arguments[0], exp.Literal) and arguments[0].is_string):
        raise SqlextError("INVALID_ARGUMENT_TYPE", function=TABLE_CHANGES, argument="the arguments",
                          expected="a Delta table's path, its first version and optionally its last",
                          value=to_sql(call), fix=usage)
    name = arguments[0].this
    try:
        path = path_of(exp.to_table(name, dialect=SparkExt))
    except Exception:  # noqa: BLE001 - not a table name: a path
        path = None
    if path is None and ("/" in name or ":" in name):
        path = name
    if path is None:
        raise SqlextError("INVALID_ARGUMENT_TYPE", function=TABLE_CHANGES, argument="the table",
                          expected="a Delta table's path", value=repr(name),
                          fix="Name the table by its path: '/data/accounts' or 'delta.`/data/accounts`'.")
    versions = []
    for argument, which in zip(arguments[1:], ("start", "end")):
        if not (isinstance(argument, exp.Literal) and not argument.is_string and argument.this.isdigit()):
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=TABLE_CHANGES, argument=which,
                              expected="a version number (0 or more)", value=to_sql(argument), fix=usage)
        versions.append(int(argument.this))
    return path, versions[0], versions[1] if len(versions) > 1 else None


class DeltaOutput:
    """A Delta table that an incremental run writes its output to, through ``deltalake``: each
    micro-batch adds its Parquet files (already in the table's folder, where a Delta reader
    does not see them until a commit names them) in one commit, which records the batch as the
    version of an application transaction (``app_id``, one per checkpoint), so that a batch
    redone after its commit adds nothing again. ``overwrite``: the files replace the table's
    (``emit => 'final'``), in the same one commit."""

    def __init__(self, folder: Folder, function: str):
        self.folder, self.function = folder, function
        self._module = _deltalake(folder.uri, function, "writing the output to")
        _location(folder.store_uri or folder.uri, folder.uri, function, {})  # a store deltalake opens
        self.uri, self.options = None, None

    def locate(self, spark) -> None:
        """Where deltalake finds the table, with the store's settings (the session's credentials)."""
        self.uri, self.options = store_location(spark, self.folder, self.folder.uri, self.function)

    def _table(self):
        """The table as deltalake reads it now; None before its first commit."""
        if not is_delta_table(self.folder):
            return None
        return self._module.DeltaTable(self.uri, storage_options=self.options or None)

    def committed(self, app_id: str) -> tuple[bool, int | None]:
        """Whether the table was made, and the last batch of ``app_id`` a commit recorded (None
        before any)."""
        table = self._table()
        return (False, None) if table is None else (True, table.transaction_version(app_id))

    def commit(self, files: list[tuple[str, int, int, int]], schema: pa.Schema, app_id: str, batch_id: int,
               overwrite: bool) -> None:
        """One commit adding ``files`` (name in the table's folder, bytes, modification time in
        milliseconds, rows) in ``schema``'s columns, recorded as batch ``batch_id`` of ``app_id``.
        The first commit makes the table."""
        from deltalake.transaction import AddAction, create_table_with_add_actions

        actions = [AddAction(name, size, {}, mtime, True, json.dumps({"numRecords": rows}))
                   for name, size, mtime, rows in files]
        properties = self._module.CommitProperties(app_transactions=[self._module.Transaction(app_id, batch_id)])
        table = self._table()
        if table is None:
            create_table_with_add_actions(self.uri, self._module.Schema.from_arrow(schema), actions, mode="append",
                                          storage_options=self.options or None, commit_properties=properties)
        else:
            self._evolve(table, schema)
            table.create_write_transaction(actions, "overwrite" if overwrite else "append", table.schema(),
                                           commit_properties=properties)

    def _evolve(self, table, schema: pa.Schema) -> None:
        """Columns the output gained (a source's schema evolution) added to the table, in a commit
        of their own before the batch's (a redo finds them there). A widened column is refused:
        ``deltalake`` does not change a column's type."""
        have = {f.name: f for f in table.schema().fields}
        fields = self._module.Schema.from_arrow(schema).fields
        widened = [f"{f.name} ({have[f.name].type} to {f.type})" for f in fields
                   if f.name in have and have[f.name].type != f.type]
        if widened:
            raise SqlextError("UNSUPPORTED_STREAM", function=self.function,
                              what=f"a wider type of {', '.join(widened)} in the Delta table {self.folder.uri}",
                              reason="deltalake does not change the type of a Delta table's column",
                              fix="Write the output as Parquet (--output-format parquet), or let the source add "
                                  "columns only (schema evolution add_columns), or start a new output.")
        added = [f for f in fields if f.name not in have]
        if added:
            table.alter.add_columns(added)

    def files(self) -> dict[str, int | None]:
        """The table's data files now (their names in its folder) with their rows, as its log
        names them; none before its first commit."""
        table = self._table()
        if table is None:
            return {}
        actions = pa.table(table.get_add_actions())
        return dict(zip(actions["path"].to_pylist(), actions["num_records"].to_pylist()))


def store_location(spark, folder: Folder, path: str, function: str) -> tuple[str, dict]:
    """What deltalake opens for a resolved folder: the store's URI (a local path for a local
    disk) and the storage options it needs (S3's keys and endpoint as Hadoop's s3a has them)."""
    uri = folder.store_uri or folder.uri
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    options = _s3_options(spark, parsed.netloc) if scheme in _S3 else \
        _azure_options(spark, parsed.netloc.rpartition("@")[2]) if scheme in AZURE else {}
    return _location(uri, path, function, options)


_S3 = ("s3", "s3a", "s3n")


def _location(uri: str, path: str, function: str, options: dict) -> tuple[str, dict]:
    """A store's URI as deltalake opens it (a local path for a local disk), with its options.

    >>> _location("file:///data/my%20t", "/data/my t", "sqlext sql", {})
    ('/data/my t', {})
    >>> _location("s3a://bucket/t", "s3a://bucket/t", "sqlext sql", {})
    ('s3://bucket/t', {})
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("file", ""):
        return unquote(parsed.path) if scheme else uri, {}
    if scheme in _S3:
        return f"s3://{parsed.netloc}{parsed.path}", options
    if scheme in ("gs", "gcs"):
        return f"gs://{parsed.netloc}{parsed.path}", {}
    if scheme in ("abfs", "abfss", "az"):
        return uri, options
    raise SqlextError("DELTA_PATH_UNSUPPORTED", function=function, path=path, store=uri)


def _s3_options(spark, bucket: str) -> dict:
    """deltalake's S3 options from Hadoop's s3a settings for ``bucket``."""
    conf = spark._jsc.hadoopConfiguration()
    names = {"access.key": "AWS_ACCESS_KEY_ID", "secret.key": "AWS_SECRET_ACCESS_KEY",
             "session.token": "AWS_SESSION_TOKEN", "endpoint": "AWS_ENDPOINT_URL", "endpoint.region": "AWS_REGION"}
    found = {key: s3a_setting(conf, bucket, name) for name, key in names.items()}
    options = {key: value for key, value in found.items() if value}
    if options.get("AWS_ENDPOINT_URL", "").startswith("http:"):
        options["AWS_ALLOW_HTTP"] = "true"
    return options


# pyarrow's names of an Azure account's credentials, and deltalake's
_AZURE_OPTIONS = {"account_name": "azure_storage_account_name", "account_key": "azure_storage_account_key",
                  "sas_token": "azure_storage_sas_key", "client_id": "azure_client_id",
                  "client_secret": "azure_client_secret", "tenant_id": "azure_tenant_id"}


def _azure_options(spark, host: str) -> dict:
    """deltalake's Azure options from Hadoop's ABFS settings for the account at ``host``
    (:func:`sqlext.storage.credentials.azure_account`); none where they name no credential deltalake takes."""
    account = azure_account(host, spark._jsc.hadoopConfiguration()) or {}
    return {_AZURE_OPTIONS[name]: value for name, value in account.items() if name in _AZURE_OPTIONS}


def _deltalake(path: str, function: str, what: str = "reading the change data feed of"):
    try:
        import deltalake
    except ImportError:
        raise SqlextError("DELTA_NOT_INSTALLED", function=function, what=what, path=path) from None
    return deltalake


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300].rstrip(".")
