"""Incremental CHANGELOG_FILTER with its state in tables, one micro-batch at a time
(``foreachBatch``), every step a native Spark plan.

The state is each key's last applied change (its row, ordering value and whether the row is
present), kept in ``<checkpoint>/sqlext-state`` as layers: a *base* (every key, after some
batch) and *deltas* (after each later batch, the keys that batch touched). A micro-batch:

1. reads the state before it, for the keys the batch touches only: the base and the deltas
   after it, the newest layer of each key winning;
2. refuses a late change (ordering value not above the key's last one) as the state-store
   engine does, or drops it when ``sequence_by`` says it is stale, inside the same plan that
   puts each touched key's last row in front of its new changes (as an insert at its own
   ordering value);
3. runs the batch CHANGELOG_FILTER (the native rewrite) over that, and keeps what the new
   changes forward: exactly the rows the batch run over the whole feed forwards for them;
4. writes those rows into the output folder as files named by the batch id, replacing any
   files of the same batch (a replayed batch writes the same rows again, never twice);
5. writes its delta: the touched keys' last applied change (with ``sequence_by`` a stale change
   is not applied). When the deltas since the base have grown to half the base's size, it
   also writes a new base (the compaction, the one step whose cost follows the number of
   keys), and layers that no batch can read any more are deleted.

Spark commits the batch in the checkpoint after the function returns, so a crash at any
point replays the batch from the same layers (a batch only reads layers of earlier batches,
and deletes only layers that the replay of its own batch does not read). Outside compaction,
the cost of a batch follows the batch: one scan of the state's layers for the touched keys,
and writes the size of the batch.
"""

from __future__ import annotations

import itertools
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from sqlext.catalog.changelog_filter import ARGUMENTS, FUNCTION, FilterSpec
from sqlext.catalog.changes import CHANGE_TYPE, INSERT, PREIMAGE, SETS_VALUE, late_change
from sqlext.rewrites.dialect import to_sql

PRESENT = "__sx_present"
LAYER = "__sx_layer"
# a new base is written once the deltas after the current one hold this share of its bytes
COMPACT_SHARE = 0.5
_views = itertools.count(1)


class TableStateRun:
    """What the ``foreachBatch`` functions of the 'tables' engine share: the statement around
    the function call, the batch call over the batch's views, and the output folder."""

    def __init__(self, call: exp.Table, outer: exp.Expression, placeholder: str, checkpoint: str, output: str,
                 output_format: str, function: str, arguments: tuple[str, ...]):
        self.call, self.outer, self.placeholder = call, outer, placeholder
        self.state = Path(checkpoint) / "sqlext-state"
        self.output, self.output_format = Path(output), output_format
        self.function, self.arguments = function, arguments

    def call_over(self, views: dict[str, str]) -> exp.Expression:
        """``SELECT * FROM <the call>`` with each table argument named in ``views`` reading
        that view instead of its stream."""
        from sqlext.catalog.arguments import read_call

        call = self.call.copy()
        tables = read_call(call, self.function, self.arguments).tables
        for name, view in views.items():
            tables[name].this.replace(exp.Table(this=exp.to_identifier(view)))
        call.set("alias", None)
        return exp.select("*").from_(call)

    def write_statement(self, spark, forwarded, batch_id: int, carry: tuple[str, ...] = (),
                        whole: bool = False) -> None:
        """The statement around the call, over the rows the call forwarded in this batch,
        written as the batch's output files; the columns ``carry`` names are kept in its rows
        (added to a select list without ``*``). ``whole``: the rows are the whole output (the
        final table), which replaces the earlier batches' files."""
        from sqlext.runner import run_statement

        out_view = f"{self.placeholder}_{batch_id}"
        forwarded.createOrReplaceTempView(out_view)
        try:
            outer = self.outer.copy()
            for table in list(outer.find_all(exp.Table)):
                if table.name == self.placeholder:
                    table.set("this", exp.to_identifier(out_view))
                    if not table.args.get("alias"):  # columns qualified by the name still resolve
                        table.set("alias", exp.TableAlias(this=exp.to_identifier(self.placeholder)))
                    if carry and not any(isinstance(e, exp.Star) for e in outer.expressions):
                        outer.select(*[exp.column(c, table=table.alias) for c in carry], copy=False)
            rows = run_statement(spark, to_sql(outer))
            write_batch_files(rows, self.output, batch_id, self.output_format, kind="base" if whole else "batch")
            if whole:
                forget_batch_files(self.output, batch_id + 1)
        finally:
            spark.catalog.dropTempView(out_view)

    @contextmanager
    def called(self, spark, feeds: dict):
        """The batch call over ``feeds`` (a frame for each table argument, by name), each read
        through a temporary view that lives as long as the block."""
        from sqlext.runner import run_statement

        views = {}
        try:
            for name, frame in feeds.items():
                views[name] = f"__sx_batch_{name}_{next(_views)}"
                frame.createOrReplaceTempView(views[name])
            yield run_statement(spark, to_sql(self.call_over(views)))
        finally:
            for view in views.values():
                spark.catalog.dropTempView(view)


def write_batch_files(frame, folder: Path, batch_id: int, file_format: str, kind: str = "batch") -> None:
    """A batch's rows as files ``<kind>-<id>-*`` in ``folder`` (``kind`` is ``batch``, or
    ``base`` for a batch that rewrites the whole state), replacing any files a previous attempt
    of the same batch left."""
    prefix = f"{kind}-{batch_id:010d}-"
    temporary = folder / f"_sx_tmp-{kind}-{batch_id}"
    frame.write.mode("overwrite").format(file_format).save(str(temporary))
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(prefix + "*"):
        stale.unlink()
    for part in sorted(temporary.glob("part-*")):
        part.rename(folder / (prefix + part.name))
    shutil.rmtree(temporary, ignore_errors=True)


def batch_files(folder: Path, batch_id: int) -> list[Path]:
    """The files that hold a folder's state before batch ``batch_id``: the newest ``base``
    written by an earlier batch, and the ``batch`` files of the batches after it."""
    if not folder.is_dir():
        return []
    numbered = [(p.name.split("-")[0], int(p.name.split("-")[1]), p) for p in folder.glob("*-*-*")
                if p.name.split("-")[0] in ("base", "batch")]
    bases = [n for kind, n, _ in numbered if kind == "base" and n < batch_id]
    base = max(bases, default=-1)
    return sorted(p for kind, n, p in numbered
                  if (kind == "base" and n == base) or (kind == "batch" and base < n < batch_id))


def read_batch_files(spark, folder: Path, batch_id: int, schema=None, only=False):
    """The rows a folder holds before batch ``batch_id`` (see :func:`batch_files`), or with
    ``only`` the rows batch ``batch_id`` itself wrote; None when there are none."""
    if only:
        paths = sorted(str(p) for p in folder.glob(f"*-{batch_id:010d}-*")) if folder.is_dir() else []
    else:
        paths = [str(p) for p in batch_files(folder, batch_id)]
    if not paths:
        return None
    reader = spark.read if schema is None else spark.read.schema(schema)
    return reader.parquet(*paths)


def forget_batch_files(folder: Path, batch_id: int) -> None:
    """Delete the files older than the ones batch ``batch_id`` reads: once it runs, the batches
    before it are committed and will not be replayed."""
    keep = set(batch_files(folder, batch_id))
    oldest = min((int(p.name.split("-")[1]) for p in keep), default=None)
    for path in folder.glob("*-*-*") if oldest is not None else []:
        if path not in keep and path.name.split("-")[0] in ("base", "batch") and int(path.name.split("-")[1]) < oldest:
            path.unlink()


class TableStateFilter(TableStateRun):
    """The ``foreachBatch`` function of one incremental CHANGELOG_FILTER."""

    def __init__(self, spec: FilterSpec, call: exp.Table, outer: exp.Expression, placeholder: str,
                 checkpoint: str, output: str, output_format: str):
        super().__init__(call, outer, placeholder, checkpoint, output, output_format, FUNCTION, ARGUMENTS)
        self.spec = spec
        self.layers = Layers(self.state)

    def __call__(self, batch, batch_id: int) -> None:
        spark, shape = batch.sparkSession, self.spec.shape  # the query's own session: its views
        keys = list(shape.key)
        changes = without_preimages(batch, shape)
        before = self.layers.before(batch_id)
        touched = changes.select(*keys).distinct()
        synthetic = None
        if self.spec.emit == "final":
            self._final(spark, before, changes, batch_id)
            return
        if before.base is None:
            feed = changes  # read twice (output, base) from the files: cheaper than materialising all history
        else:
            old = self._touched_state(spark, before, touched, changes.schema)
            synthetic = as_inserts(old, shape, changes.columns)
            feed = synthetic.unionByName(self._in_order(changes, old)).localCheckpoint()
        with self.called(spark, {"input": feed}) as forwarded:
            if synthetic is not None:
                forwarded = forwarded.join(synthetic.select(*keys, shape.order_by),
                                           key_match(forwarded, synthetic, keys + [shape.order_by]), "left_anti")
            self.write_statement(spark, forwarded, batch_id)
        self._write_state(spark, before, feed, batch_id)

    def _final(self, spark, before: "Before", changes, batch_id: int) -> None:
        """``emit => 'final'``: the whole filtered table after this batch (a cost that
        follows the number of keys, not the history)."""
        shape, keys = self.spec.shape, list(self.spec.shape.key)
        if before.base is None:
            feed = changes
        else:
            old = newest_layer(before.read(spark, state_schema(shape, changes.schema)), keys, before).localCheckpoint()
            feed = as_inserts(old, shape, changes.columns).unionByName(self._in_order(changes, old)).localCheckpoint()
        with self.called(spark, {"input": feed}) as table:
            self.write_statement(spark, table, batch_id, whole=True)
        if before.base is not None:  # the state changes for the keys the batch touches only
            from pyspark.sql import functions as F

            touched = F.broadcast(changes.select(*keys).distinct())
            feed = feed.join(touched, key_match(feed, touched, keys), "left_semi")
        self._write_state(spark, before, feed, batch_id)

    # -- the state

    def _touched_state(self, spark, before: "Before", touched, changes_schema):
        """The last applied change of every key the batch touches (materialised: the plan
        reads it three times)."""
        from pyspark.sql import functions as F

        keys = list(self.spec.shape.key)
        layers = before.read(spark, state_schema(self.spec.shape, changes_schema))
        old = newest_layer(layers.join(F.broadcast(touched), key_match(layers, touched, keys), "left_semi"), keys,
                           before)
        return old.localCheckpoint()

    def _write_state(self, spark, before: "Before", feed, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        if shape.sequence_by is not None:  # the last change applied: a stale one is not
            earlier = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(shape.order_by)) \
                .rowsBetween(Window.unboundedPreceding, -1)
            newest = F.max(F.col(shape.sequence_by)).over(earlier)
            feed = feed.withColumn("__sx_newest", newest) \
                .where(F.col("__sx_newest").isNull() | (F.col(shape.sequence_by) >= F.col("__sx_newest"))) \
                .drop("__sx_newest")
        self.layers.write(spark, before, last_changes(feed, shape), keys, batch_id)

    def _in_order(self, changes, old):
        """The new changes without the stale ones; a late change that is not stale stops the
        batch with ``[LATE_CHANGE]`` when the plan reaches it (Spark's ``raise_error``)."""
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        o = old.select(*[F.col(k).alias(f"__sx_k{i}") for i, k in enumerate(keys)],
                       F.col(shape.order_by).alias(LAST),
                       *([F.col(shape.sequence_by).alias("__sx_seq")] if shape.sequence_by else []))
        match = None
        for i, k in enumerate(keys):
            term = F.col(k).eqNullSafe(F.col(f"__sx_k{i}"))
            match = term if match is None else match & term
        joined = changes.join(F.broadcast(o), match, "left")
        late = F.col(LAST).isNotNull() & (F.col(shape.order_by) <= F.col(LAST))
        stale = F.lit(False)
        if shape.sequence_by:
            stale = late & F.col(shape.sequence_by).isNotNull() & (F.col(shape.sequence_by) < F.col("__sx_seq"))
        refuse = refuse_late(late & ~stale, FUNCTION, shape, changes.schema)
        return joined.where(refuse & ~stale).select(*changes.columns)


LAST = "__sx_last"


def present_column(shape):
    """Whether a change leaves its key with a row: an insert or update, or in an upsert log a
    row with a value."""
    from pyspark.sql import functions as F

    if shape.has_change_type:
        return F.col(CHANGE_TYPE).isin(*SETS_VALUE)
    present = F.lit(False)
    for column in shape.tombstone_columns:
        present = present | F.col(column).isNotNull()
    return present


def without_preimages(changes, shape):
    """``update_preimage`` rows carry nothing the state does not know."""
    from pyspark.sql import functions as F

    if not shape.has_change_type:
        return changes
    return changes.where(F.col(CHANGE_TYPE).isNull() | (F.col(CHANGE_TYPE) != F.lit(PREIMAGE)))


def as_inserts(state, shape, columns):
    """The present rows of a state as changes that insert them at their own ordering value."""
    from pyspark.sql import functions as F

    present = state.where(F.col(PRESENT))
    if shape.has_change_type:
        present = present.withColumn(CHANGE_TYPE, F.lit(INSERT))
    return present.select(*columns)


def last_changes(feed, shape, *extra):
    """Each key's last change in ``feed``: its data columns, ordering value, ``extra``
    columns and whether it leaves a row (``__sx_present``)."""
    return _first_per_key(feed.withColumn(PRESENT, present_column(shape)), shape.key, shape.order_by) \
        .select(*shape.data_columns, shape.order_by, *extra, PRESENT)


def state_schema(shape, changes_schema, *extra):
    """The state's columns: the data columns, the ordering column, ``extra`` fields and
    ``__sx_present``."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    fields = {field.name: field for field in changes_schema.fields}
    return StructType([fields[c] for c in (*shape.data_columns, shape.order_by)] + list(extra)
                      + [StructField(PRESENT, BooleanType(), True)])


def newest_layer(rows, keys, before: "Before"):
    """Of the layers' rows of each key, the newest layer's (one layer needs no choosing)."""
    if before.deltas:
        rows = _first_per_key(rows, keys, LAYER)
    return rows.drop(LAYER)


def _first_per_key(rows, keys, descending: str):
    """Each key's row with the highest ``descending`` value."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(descending).desc())
    return rows.withColumn("__sx_rank", F.row_number().over(first)).where(F.col("__sx_rank") == 1).drop("__sx_rank")


def refuse_late(late, function: str, shape, schema, across_inputs: bool = False):
    """A condition that is true, or stops the plan with ``[LATE_CHANGE]`` on a row where
    ``late`` holds (the key's or both inputs' last ordering value is in ``__sx_last``)."""
    from pyspark.sql import functions as F

    return F.when(late, F.raise_error(_late_message(function, shape, schema, across_inputs))).otherwise(F.lit(True))


def _late_message(function: str, shape, schema, across_inputs: bool):
    """``[LATE_CHANGE]``'s text for the row at hand, as a column: the message is made by the
    error class with markers where the row's values go."""
    from pyspark.sql import functions as F

    marks = {"key": "\x00key\x00", "value": "\x00value\x00", "last": "\x00last\x00"}
    text = str(late_change(function, order_by=shape.order_by, across_inputs=across_inputs, **marks))
    types = {field.name: field.dataType for field in schema.fields}
    values = {
        "key": F.concat_ws(", ", *[F.concat(F.lit(k + "="), _shown(F.col(k), types[k])) for k in shape.key]),
        "value": _shown(F.col(shape.order_by), types[shape.order_by]),
        "last": _shown(F.col(LAST), types[shape.order_by]),
    }
    return F.concat(*[values[piece] if piece in values else F.lit(piece) for piece in text.split("\x00")])


@dataclass(frozen=True)
class Before:
    """The layers that hold the state before one batch: a base and the deltas after it."""

    base: int | None
    deltas: tuple[int, ...]
    layers: "Layers"

    def read(self, spark, schema):
        """Every row of these layers (``schema``: the state's columns), each with its layer's
        batch id in ``__sx_layer``."""
        from pyspark.sql import functions as F

        def layer(path, number):
            return spark.read.schema(schema).parquet(str(path)).withColumn(LAYER, F.lit(number))

        frames = [layer(self.layers.base_path(self.base), self.base)]
        frames += [layer(self.layers.delta_path(d), d) for d in self.deltas]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        return union


class Layers:
    """The folder of state layers, ``base-<batch>`` and ``delta-<batch>``; a layer counts once
    Spark's write of it has finished (its ``_SUCCESS`` file)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def base_path(self, batch_id: int) -> Path:
        return self.folder / f"base-{batch_id}"

    def delta_path(self, batch_id: int) -> Path:
        return self.folder / f"delta-{batch_id}"

    def _numbered(self, kind: str) -> list[tuple[int, Path]]:
        """The layers of ``kind`` in the folder, by batch id (finished or not)."""
        found = []
        for path in self.folder.glob(f"{kind}-*"):
            number = path.name[len(kind) + 1:]
            if number.isdigit():
                found.append((int(number), path))
        return sorted(found)

    def _finished(self, kind: str) -> list[int]:
        return [number for number, path in self._numbered(kind) if (path / "_SUCCESS").exists()]

    def before(self, batch_id: int) -> Before:
        """The layers a batch reads: the newest base of an earlier batch and the deltas after it."""
        bases = [b for b in self._finished("base") if b < batch_id]
        if not bases:
            return Before(None, (), self)
        base = bases[-1]
        deltas = tuple(d for d in self._finished("delta") if base < d < batch_id)
        return Before(base, deltas, self)

    def write(self, spark, before: Before, latest, keys, batch_id: int) -> None:
        """Write a batch's layer: the base on the first batch, else a delta (and a new base
        when the deltas are worth compacting); then forget the layers no replay reads."""
        if before.base is None:
            latest.write.mode("overwrite").parquet(str(self.base_path(batch_id)))
            return
        latest.write.mode("overwrite").parquet(str(self.delta_path(batch_id)))
        if self.worth_compacting(before, batch_id):
            after = Before(before.base, before.deltas + (batch_id,), self)
            newest_layer(after.read(spark, latest.schema), keys, after) \
                .write.mode("overwrite").parquet(str(self.base_path(batch_id)))
        self.forget_before(before)

    def worth_compacting(self, before: Before, batch_id: int) -> bool:
        deltas = sum(_size(self.delta_path(d)) for d in before.deltas + (batch_id,))
        return deltas >= COMPACT_SHARE * _size(self.base_path(before.base))

    def forget_before(self, before: Before) -> None:
        """Delete the layers older than the ones this batch read: once this batch runs, the
        batches before it are committed and will not be replayed."""
        if before.base is None:
            return
        for kind in ("base", "delta"):
            for number, path in self._numbered(kind):
                if number < before.base or (kind == "delta" and number <= before.base):
                    shutil.rmtree(path, ignore_errors=True)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("part-*"))


def _shown(column, data_type):
    """A value as the error message shows it: text in quotes, anything else as Spark prints it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    text = column.cast("string")
    if isinstance(data_type, StringType):
        text = F.concat(F.lit("'"), text, F.lit("'"))
    return F.when(column.isNull(), F.lit("None")).otherwise(text)


def key_match(left, right, keys):
    """Equal (NULL equal to NULL) on every column of ``keys``."""
    match = None
    for k in keys:
        term = left[k].eqNullSafe(right[k])
        match = term if match is None else match & term
    return match
