"""The one keyed state of every incremental function: a compacted base and one cumulative delta.

A state is a folder (any store :mod:`sqlext.storage` reaches) of Parquet layers
holding one row per key:

* ``base-<batch>``: every key, as batch ``<batch>`` left it (the compaction);
* ``delta-<batch>``: every key changed since the base, as batch ``<batch>`` left it. Each batch
  writes a new delta holding the previous delta's rows and its own changes (newest wins), so a
  reader meets at most one delta and never chooses between layers with a window.

A key's current row is its delta row if the delta has one, else its base row. When the delta
holds a share of the base (``COMPACT_SHARE`` of its bytes), the batch writes a new base
instead: the base's rows less the delta's keys, plus the delta. The cost of a batch is then its
own changes, the lookups of what they meet, and the delta (bounded by that share); only a
compaction costs the whole state.

The state's columns are recorded once, in ``schema.json``, and every read uses them: no file's
schema is inferred. A batch reads only the layers of earlier batches and writes layers named
by its own id (a layer appears whole: renamed into place, or committed by a commit file on an
object store; see :mod:`sqlext.storage`), so a batch replayed after a crash reads
what it read before and writes the same layers again. Layers that no replay can
read any more are deleted.

Lookups run on the driver over Arrow data (a scan of the key or foreign-key column and an
in-memory hash join, :mod:`sqlext.streaming.keyed_rows`: no Spark job), or as Spark frames for
large batches. The layers a process reads or writes on the driver stay in its memory for the
next batch (:mod:`sqlext.streaming.layer_cache`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.functions.arguments import quote
from sqlext.storage import Folder, read_parquet
from sqlext.streaming.keyed_rows import among, buckets_of, exclude, over, restrict
from sqlext.streaming.layer_cache import LAYERS, same_columns
from sqlext.streaming.schema_evolution import merged_fields

# a new base is written once the delta holds this share of the base's bytes
COMPACT_SHARE = 0.25
SCHEMA_FILE = "schema.json"
BUCKETS_FILE = "buckets.json"
# buckets-<generation>.json ({"buckets": n}): the layout a rescale gave the state, its layers in
# generation-<generation>/bucket-<k>; the highest generation written is the state's
LAYOUT_PREFIX, LAYOUT_SUFFIX = "buckets-", ".json"
# Parquet row groups this small keep the statistics that let a lookup skip most of them
ROW_GROUP_BYTES = 2 * 1024 * 1024


class KeyedState:
    """One keyed state in ``folder``: rows of the columns ``schema`` (a Spark ``StructType``),
    one per value of the ``keys`` columns, held in ``buckets`` parts by a hash of the key
    (:func:`buckets_of`), each part a base and at most one delta. A state of one bucket keeps
    its layers in ``folder`` itself; of several, in ``folder/bucket-<n>``. The engine gives each
    bucket of a large run to a task of its own (:mod:`sqlext.streaming.engine`); the bucket
    count is recorded with the columns on the first write, and changes only by a rescale
    (:mod:`sqlext.streaming.rescale`), which writes the state again in a new generation:
    ``folder/generation-<g>/bucket-<n>``, named by a ``buckets-<g>.json`` file."""

    def __init__(self, folder: Folder, keys: Sequence[str], share: float | None = None,
                 bucket_by: Sequence[str] | None = None):
        """``bucket_by``: the leading key columns that choose a row's bucket (by default the
        whole key), so that the rows sharing them (a group's values) are in one bucket."""
        self.folder, self.keys = folder, list(keys)
        self.bucket_by = list(bucket_by or keys)
        self.share = share  # this state's compaction share (None: COMPACT_SHARE)
        self._schema = None
        self._buckets = None
        self._generation = 0

    # -- the columns and buckets

    @property
    def schema(self):
        """The state's columns (a Spark ``StructType``), as recorded; None before the first write."""
        if self._schema is None:
            recorded = (self.folder / SCHEMA_FILE).read_json()
            if recorded is not None:
                from pyspark.sql.types import StructType

                self._schema = StructType.fromJson(recorded)
        return self._schema

    @property
    def buckets(self) -> int:
        """The number of parts the state is kept in (1 where none is recorded: a state of an
        earlier sqlext, kept in one part)."""
        if self._buckets is None:
            self._read_layout()
        return self._buckets

    @property
    def generation(self) -> int:
        """How many times the state was rescaled (0: kept as its first run laid it out)."""
        if self._buckets is None:
            self._read_layout()
        return self._generation

    def layouts(self) -> list[int]:
        """The generations whose layout file is written, in order."""
        found = []
        for entry in self.folder.entries():
            number = entry.name[len(LAYOUT_PREFIX):-len(LAYOUT_SUFFIX)]
            if entry.name.startswith(LAYOUT_PREFIX) and entry.name.endswith(LAYOUT_SUFFIX) and number.isdigit():
                found.append(int(number))
        return sorted(found)

    def _read_layout(self) -> None:
        generations = self.layouts()
        if generations:  # written whole, never rewritten: the newest is the state's layout
            self._generation = generations[-1]
            recorded = (self.folder / f"{LAYOUT_PREFIX}{self._generation}{LAYOUT_SUFFIX}").read_json()
        else:
            self._generation, recorded = 0, (self.folder / BUCKETS_FILE).read_json()
        self._buckets = int(recorded["buckets"]) if recorded else 1

    def laid_out(self, buckets: int, generation: int) -> "KeyedState":
        """The same state in another layout (what a rescale writes before it is the state's)."""
        other = KeyedState(self.folder, self.keys, self.share, self.bucket_by)
        other._schema, other._buckets, other._generation = self.schema, int(buckets), int(generation)
        return other

    def adopt(self, layout: "KeyedState") -> None:
        """Read and write in ``layout``'s buckets from now on (once its layout file is written)."""
        self._buckets, self._generation = layout.buckets, layout.generation

    def home(self) -> Folder:
        """The folder of the current layout's parts."""
        return self.folder if self.generation == 0 else self.folder / f"generation-{self.generation}"

    def record_schema(self, schema, buckets: int = 1) -> None:
        """Record the state's columns and bucket count on its first write. Later writes keep
        them, but for columns its input gained or widened (schema evolution, which the run's
        sources allowed: :mod:`sqlext.streaming.schema_evolution`): those are recorded too, and
        the layers written before read NULL, or the narrower values, there."""
        if self.schema is None:
            if buckets != 1:
                (self.folder / BUCKETS_FILE).write_json({"buckets": int(buckets)})
            (self.folder / SCHEMA_FILE).write_json(schema.jsonValue())
            self._schema, self._buckets = schema, int(buckets)
            return
        fields = merged_fields(self.schema.fields, schema.fields)
        if fields is not None and [(f.name, f.dataType) for f in fields] != \
                [(f.name, f.dataType) for f in self.schema.fields]:
            from pyspark.sql.types import StructType

            evolved = StructType(fields)
            (self.folder / SCHEMA_FILE).write_json(evolved.jsonValue())
            self._schema = evolved

    @property
    def arrow_schema(self) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.schema, timezone="UTC")

    def part(self, bucket: int) -> "_Part":
        if self.buckets == 1 and self.generation == 0:
            return _Part(self, self.folder)
        return _Part(self, self.home() / f"bucket-{bucket}")

    def bucket_of(self, rows: pa.Table, columns: Sequence[str] | None = None) -> np.ndarray:
        """The bucket of each row, by its bucket columns (in ``columns``, by default their own
        names), read as the key's recorded types."""
        columns = list(columns or self.bucket_by)
        if self.buckets == 1:
            return np.zeros(rows.num_rows, dtype=np.int64)
        schema = self.arrow_schema
        typed = pa.table([rows[c].cast(schema.field(k).type, safe=False) for c, k in zip(columns, self.bucket_by)],
                         names=self.bucket_by)
        return buckets_of(typed, self.bucket_by, self.buckets)

    # -- reading and writing

    def before(self, batch_id: int, only: int | None = None) -> "StateView":
        """The state as batch ``batch_id`` reads it: in each bucket the newest base of an
        earlier batch and the newest delta after it; only bucket ``only`` where given (a task's
        own bucket)."""
        return StateView(self, batch_id, only)

    def write(self, view: "StateView", changed, batch_id: int, keep=None, commit: bool = True) -> list["Pending"]:
        """Batch ``batch_id``'s layers: the rows of the keys it changed (``changed``: an Arrow
        table, or for a state of one bucket a Spark frame, of the state's columns, one row per
        key) on top of ``view``, in the buckets the view reads (rows of other buckets belong to
        another task and are left out). ``keep`` (a Spark column for frames, an Arrow expression
        for Arrow data) says which rows a new base keeps: rows that can no longer matter are
        dropped when the state is compacted. The layers no replay reads are forgotten. With
        ``commit=False`` the layers are written but not visible: :meth:`commit` the returned
        pending layers once the whole batch is written."""
        if not isinstance(changed, pa.Table):
            if self.buckets != 1:
                raise ValueError("a state of several buckets is written from Arrow data")
            pending = [self.part(0).write_frame(view.part(0), changed, batch_id, keep)]
        else:
            changed = conformed(changed, self.arrow_schema)
            owner = self.bucket_of(changed)
            pending = []
            for bucket in view.bucket_numbers():
                mine = changed if self.buckets == 1 else changed.filter(pa.array(owner == bucket))
                if mine.num_rows or self.buckets == 1:
                    pending.append(self.part(bucket).write_arrow(view.part(bucket), mine, batch_id, keep))
        pending = [p for p in pending if p is not None]
        if commit:
            self.commit(pending)
        return pending

    def commit(self, pending: Sequence["Pending"]) -> None:
        """Make written layers visible (each whole) and forget the layers no replay reads."""
        for layer in pending:
            part = self.part(layer.bucket)
            part.path(layer.kind, layer.batch_id).commit_layer()
            part.forget(layer.read)

    @property
    def _share(self) -> float:
        return COMPACT_SHARE if self.share is None else self.share


@dataclass(frozen=True)
class Pending:
    """A layer written and not yet committed: its bucket, kind (``base`` or ``delta``), batch,
    and the layers the batch read in that bucket (older ones are forgotten on commit)."""

    bucket: int
    kind: str
    batch_id: int
    read: tuple


class LayerWrites:
    """A batch's new state layers, written by threads of their own while the batch goes on
    (Arrow and Parquet let go of Python's lock as they work) and visible only once
    :meth:`commit` is called, after the batch's output is written: until then a stopped batch
    has committed nothing of its own, and the order of the writes does not matter. Leaving the
    ``with`` block waits for the writes, also when the batch fails."""

    def __init__(self, threads: int = 1):
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sqlext-state")
        self._writes: list = []

    def __enter__(self) -> "LayerWrites":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True)

    def write(self, state: KeyedState, view: "StateView", changed, batch_id: int, keep=None) -> None:
        """:meth:`KeyedState.write` of ``changed`` on top of ``view``, not committed."""
        self._writes.append((state, self._pool.submit(state.write, view, changed, batch_id, keep=keep,
                                                      commit=False)))

    def wait(self) -> list[tuple[KeyedState, list[Pending]]]:
        """Each state with its layers written, once every write is done."""
        return [(state, written.result()) for state, written in self._writes]

    def commit(self, *states: KeyedState) -> None:
        """Make every layer written visible: the states' in the order ``states`` names them
        where it is given, else in the order the writes were asked for."""
        written = self.wait()
        if states:
            written = sorted(written, key=lambda pair: states.index(pair[0]))
        for state, layers in written:
            state.commit(layers)


class _Part:
    """One bucket of a state: a folder of layers."""

    def __init__(self, state: KeyedState, folder: Folder):
        self.state, self.folder = state, folder

    def _finished(self, kind: str) -> list[int]:
        found = []
        for name in self.folder.committed_names():
            number = name[len(kind) + 1:]
            if name.startswith(kind + "-") and number.isdigit():
                found.append(int(number))
        return sorted(found)

    def before(self, batch_id: int) -> "PartView":
        finished = {kind: self._finished(kind) for kind in ("base", "delta")}
        bases = [b for b in finished["base"] if b < batch_id]
        base = bases[-1] if bases else None
        deltas = [d for d in finished["delta"] if base is not None and base < d < batch_id]
        return PartView(self, base, deltas[-1] if deltas else None)

    def path(self, kind: str, batch_id: int) -> Folder:
        return self.folder / f"{kind}-{batch_id}"

    def write_arrow(self, view: "PartView", changed: pa.Table, batch_id: int, keep=None) -> Pending:
        state = self.state
        kept = (lambda rows: rows) if keep is None else (lambda rows: rows.filter(keep))
        if view.base is None:
            return self._put("base", batch_id, kept(changed), view)
        delta = changed
        if view.delta is not None:
            old = view.read_layer(view.delta)
            delta = pa.concat_tables([exclude(old, changed, state.keys), changed])
        if delta.num_rows >= state._share * view.base_rows():
            base = view.read_layer(view.base)
            return self._put("base", batch_id, kept(pa.concat_tables([exclude(base, delta, state.keys), delta])), view)
        return self._put("delta", batch_id, delta, view)

    def write_frame(self, view: "PartView", changed, batch_id: int, keep=None) -> Pending:
        from pyspark.sql import functions as F

        state = self.state
        spark = changed.sparkSession
        given = set(changed.columns)
        changed = changed.select(*[(F.col(quote(f.name)) if f.name in given else F.lit(None)).cast(f.dataType)
                                   .alias(f.name) for f in state.schema.fields])
        if view.base is None:
            return self._put_frame("base", batch_id, changed if keep is None else changed.where(keep), view)
        delta = changed
        if view.delta is not None:
            delta = over(view.frame_of(spark, view.delta), changed, state.keys)
        if state._share == 0:  # compacted every batch: straight into a new base
            rows = over(view.frame_of(spark, view.base), delta, state.keys)
            return self._put_frame("base", batch_id, rows if keep is None else rows.where(keep), view)
        delta = delta.localCheckpoint()
        layer = self.path("delta", batch_id)
        written = self._put_frame("delta", batch_id, delta, view)
        if _rows(layer.pending()) >= state._share * view.base_rows():
            rows = over(view.frame_of(spark, view.base), delta, state.keys)
            layer.pending().delete()
            return self._put_frame("base", batch_id, rows if keep is None else rows.where(keep), view)
        return written

    def _put(self, kind: str, batch_id: int, table: pa.Table, view: "PartView") -> Pending:
        self.write_layer(kind, batch_id, table)
        return Pending(view.bucket, kind, batch_id, (view.base, view.delta))

    def write_layer(self, kind: str, batch_id: int, table: pa.Table) -> Folder:
        """Write a layer, not committed; the layer's folder."""
        # a base too large for the process's cache is written in key order, so that a lookup pushed
        # into the reader finds its values in few row groups; one the cache holds is looked up in
        # memory, by its index, and the sort would only cost time
        if kind == "base" and table.nbytes * 4 > LAYERS.limit:
            try:
                table = table.sort_by([(k, "ascending") for k in self.state.keys])
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a key type without an order
                pass
        layer = self.path(kind, batch_id)
        pending = layer.begin_layer()
        (pending / "part-00000.parquet").write_parquet(table, row_group_size=128 * 1024, whole=False)
        # kept under the layer's own name: renamed or committed, its files stay as they are; in
        # one piece, since a lookup's take over a table of many pieces (a walk's levels, one each)
        # costs several times as much
        LAYERS.put(layer, table.combine_chunks() if table.num_columns and table.column(0).num_chunks > 1 else table,
                   identity=pending.identity())
        return layer

    def _put_frame(self, kind: str, batch_id: int, frame, view: "PartView") -> Pending:
        pending = self.path(kind, batch_id).begin_layer()
        if kind == "base":
            frame = frame.sortWithinPartitions(*[quote(k) for k in self.state.keys])
        frame.write.mode("overwrite").option("parquet.block.size", ROW_GROUP_BYTES).parquet(pending.uri)
        return Pending(view.bucket, kind, batch_id, (view.base, view.delta))

    def forget(self, read: tuple) -> None:
        """Delete the layers older than those a batch read (``(base, delta)``): the batch ran
        after every earlier batch committed, so no replay reads them."""
        base, delta = read
        if base is None:
            return
        for kind in ("base", "delta"):
            for number in self._finished(kind):
                older = number < base if kind == "base" else number <= base or (delta is not None and number < delta)
                if older:
                    self.path(kind, number).delete_layer()
                    LAYERS.forget(self.path(kind, number))


class StateView:
    """The state as one batch reads it: in each bucket (or in the one bucket of a task) a base
    and at most one delta, found when a lookup first needs that bucket."""

    def __init__(self, state: KeyedState, batch_id: int, only: int | None = None):
        self.state, self.batch_id, self.only = state, batch_id, only
        self._parts: dict[int, PartView] = {}

    def bucket_numbers(self) -> list[int]:
        return [self.only] if self.only is not None else list(range(self.state.buckets))

    def part(self, bucket: int) -> "PartView":
        view = self._parts.get(bucket)
        if view is None:
            view = self._parts[bucket] = self.state.part(bucket).before(self.batch_id)
            view.bucket = bucket
        return view

    def owned(self, bucket: int) -> "StateView":
        """The same view, of one bucket only (what a task writes: the rows of its own keys)."""
        view = StateView(self.state, self.batch_id, bucket)
        view._parts = self._parts
        return view

    def parts(self) -> list["PartView"]:
        return [self.part(b) for b in self.bucket_numbers()]

    def layers(self) -> tuple:
        """The layers read, by bucket: (bucket, base, delta)."""
        return tuple((b, v.base, v.delta) for b, v in zip(self.bucket_numbers(), self.parts()))

    def __eq__(self, other) -> bool:
        return isinstance(other, StateView) and self.state.folder == other.state.folder \
            and self.layers() == other.layers()

    @property
    def empty(self) -> bool:
        return all(v.empty for v in self.parts())

    def load(self) -> "StateView":
        for view in self.parts():
            view.load()
        return self

    def stored_rows(self) -> int:
        """The rows the view's layers hold, the bases' and the deltas', from their footers."""
        return sum(v.stored_rows() for v in self.parts())

    def stored_bytes(self) -> int:
        """The bytes of the view's layer files."""
        return sum(v.stored_bytes() for v in self.parts())

    def rows(self, column: str | None = None, values: pa.Array | None = None, keys: pa.Table | None = None) -> pa.Table:
        """The current rows (Arrow) whose ``column`` is among ``values``, or whose key is among the
        rows of ``keys``; every current row when neither is given. Keys are looked up in their own
        buckets only; a column in every bucket the view reads."""
        buckets = self.bucket_numbers()
        if keys is not None and self.state.buckets > 1:
            owner = self.state.bucket_of(keys)
            found = [self.part(b).rows(column, values, keys.filter(pa.array(owner == b)))
                     for b in buckets if (owner == b).any()]
        else:
            found = [self.part(b).rows(column, values, keys) for b in buckets]
        if not found:
            return self.state.arrow_schema.empty_table()
        return found[0] if len(found) == 1 else pa.concat_tables(found)

    def rows_within(self, within: pa.Table) -> pa.Table:
        """The current rows whose bucket columns equal those of a row of ``within`` (all the
        values of some groups, say), each looked up in its own bucket."""
        first = self.state.bucket_by[0]
        owner = self.state.bucket_of(within)
        found = []
        for bucket in self.bucket_numbers():
            mine = within.filter(pa.array(owner == bucket))
            if mine.num_rows:
                rows = self.part(bucket).rows(column=first, values=pc.unique(mine[first].combine_chunks()))
                found.append(restrict(rows, mine, self.state.bucket_by))
        return pa.concat_tables(found) if found else self.state.arrow_schema.empty_table()

    def frame(self, spark):
        """The current rows as a Spark frame (the bases less the deltas' keys, plus the deltas)."""
        parts = [v for v in self.parts() if not v.empty]
        if not parts:
            return spark.createDataFrame([], self.state.schema)
        reader = spark.read.schema(self.state.schema)
        base = reader.parquet(*[v.path_of(v.base).uri for v in parts])
        deltas = [v.path_of(v.delta).uri for v in parts if v.delta is not None]
        return over(base, reader.parquet(*deltas), self.state.keys) if deltas else base


@dataclass
class PartView:
    """One bucket as one batch reads it: a base and at most one delta."""

    part: _Part
    base: int | None
    delta: int | None
    bucket: int = 0
    # the layers read whole, for a batch that looks the state up several times (see load)
    _loaded: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def state(self) -> KeyedState:
        return self.part.state

    @property
    def empty(self) -> bool:
        return self.base is None

    def load(self) -> "PartView":
        """Read the layers once, whole, so that the lookups of this batch filter them in
        memory instead of reading the files again each time."""
        for batch_id in (self.base, self.delta):
            if batch_id is not None and batch_id not in self._loaded:
                self._loaded[batch_id] = self.read_layer(batch_id)
        return self

    def base_rows(self) -> int:
        return _rows(self.path_of(self.base)) if self.base is not None else 0

    def stored_rows(self) -> int:
        return self.base_rows() + (_rows(self.path_of(self.delta)) if self.delta is not None else 0)

    def stored_bytes(self) -> int:
        return sum(e.size for batch_id in (self.base, self.delta) if batch_id is not None
                   for e in self.path_of(batch_id).entries() if _is_part(e.name))

    def path_of(self, batch_id: int) -> Folder:
        return self.part.path("base" if batch_id == self.base else "delta", batch_id)

    def read_layer(self, batch_id: int, columns: Sequence[str] | None = None, filter=None) -> pa.Table:
        """One layer's rows as Arrow data, with the state's recorded columns."""
        table = self._in_memory(batch_id)
        if table is None:  # too large to keep: read what is asked, the filter pushed into the files
            return read_parquet(_parts(self.path_of(batch_id)), self.state.arrow_schema, columns, filter)
        table = table if filter is None else table.filter(filter)
        return table if columns is None else table.select(columns)

    def _in_memory(self, batch_id: int) -> pa.Table | None:
        """The layer's rows in memory: loaded by this view, kept from an earlier batch (see
        :data:`LAYERS`), or read now and kept; None for a layer too large to keep."""
        if batch_id in self._loaded:
            return self._loaded[batch_id]
        folder = self.path_of(batch_id)
        table = LAYERS.get(folder)
        if table is not None and same_columns(table.schema, self.state.arrow_schema):
            return table  # (a state whose columns evolved since reads its layers again)
        entries = [e for e in folder.entries() if _is_part(e.name)]
        if not entries:
            return self.state.arrow_schema.empty_table()
        if sum(e.size for e in entries) * 4 > LAYERS.limit:
            return None
        table = read_parquet([folder / e.name for e in entries], self.state.arrow_schema)
        LAYERS.put(folder, table)
        return table

    def rows(self, column: str | None = None, values: pa.Array | None = None, keys: pa.Table | None = None) -> pa.Table:
        """The current rows of this bucket whose ``column`` is among ``values``, or whose key is
        among the rows of ``keys``; every current row when neither is given."""
        if self.base is None:
            return self.state.arrow_schema.empty_table()

        if column is not None:  # as the column's type (a value that does not fit matches nothing it should)
            values = values.cast(self.state.arrow_schema.field(column).type, safe=False)

        def restricted(table):
            if column is not None:
                table = table.filter(pc.is_in(table[column], value_set=values, skip_nulls=False))
            if keys is not None:
                table = restrict(table, keys, self.state.keys)
            return table

        # the one column whose values the lookup narrows by: the column asked for, or a single key
        asked = (column, values) if column is not None else \
            (self.state.keys[0], keys[self.state.keys[0]].combine_chunks()) \
            if keys is not None and len(self.state.keys) == 1 else None
        whole = self._in_memory(self.base)
        found = None
        if whole is not None and asked is not None and (column is None or keys is None):  # its index
            found = LAYERS.lookup(self.path_of(self.base), *asked)
        if found is not None:
            base = whole.take(pa.array(found, pa.int64()))
        elif whole is not None:  # in memory, masks are quicker than a filter expression
            base = restricted(whole)
        else:  # too large to keep: the lookup pushed into the Parquet reader
            base = restricted(self.read_layer(self.base, filter=None if asked is None else among(*asked)))
        if self.delta is None:
            return base
        delta = self.read_layer(self.delta)
        return pa.concat_tables([exclude(base, delta, self.state.keys), restricted(delta)])

    def frame_of(self, spark, batch_id: int):
        return spark.read.schema(self.state.schema).parquet(self.path_of(batch_id).uri)


def conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in the columns of ``schema``, cast to its types; a column the rows lack (one a
    state gained by schema evolution that this run's input no longer holds) is NULL."""
    return pa.table([rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                     for f in schema], schema=schema)


def _rows(folder: Folder) -> int:
    """The rows of a layer's files, from their footers."""
    return sum(p.parquet_rows() for p in _parts(folder))


def _is_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


def _parts(folder: Folder) -> list[Folder]:
    return folder.files()


# -- matching rows by key on Arrow data (NULL equal to NULL, as the functions group keys)

