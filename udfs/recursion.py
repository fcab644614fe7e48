"""The executor of ``RECURSIVE_EXPAND``: runs one recursion on the path that fits it (the graph
walk, path doubling, or level by level; see :mod:`sqlext.udfs.recursive_expand`) and returns
its result as a DataFrame. The path taken is left in :data:`last_path`.
"""

from __future__ import annotations

from sqlext.catalog.recursive_expand import DEFAULT_ROW_LIMIT, FUNCTION, ROW_LIMIT_CONF, RecursiveSpec
from sqlext.errors import SqlextError
from sqlext.udfs import recursive_jump, recursive_plan
from sqlext.udfs.recursive_expand import last_path, run_levels

__all__ = ["expand", "last_path"]


def expand(spark, spec: RecursiveSpec, scoped=None, path: str | None = None):
    """The recursion's result as a DataFrame: computed and checkpointed level by level, or a
    lazy graph walk (whose errors surface when the result is read).

    ``scoped`` puts a query's text inside the CTEs that anchor and step read; ``path``
    ('auto', 'walk', 'jump' or 'levels') defaults to ``spark.sqlext.recursion.path``; the
    path that ran is left in ``last_path['path']``.
    """
    path = path or spark.conf.get("spark.sqlext.recursion.path", "auto")
    spec.row_limit = int(spark.conf.get(ROW_LIMIT_CONF, str(DEFAULT_ROW_LIMIT)))
    scoped = scoped or (lambda text: text)
    anchor = spark.sql(scoped(spec.anchor_sql))
    if spec.columns:
        if len(spec.columns) != len(anchor.columns):
            raise SqlextError(
                "UNSUPPORTED_STATEMENT", function=FUNCTION,
                reason=f"{spec.name} names {len(spec.columns)} columns but its anchor returns "
                       f"{len(anchor.columns)}", fix="Make the column list and the anchor agree.")
        anchor = anchor.toDF(*spec.columns)
    else:
        spec.columns = list(anchor.columns)
    if path not in ("levels", "jump"):
        walk_frame = recursive_plan.try_walk(spark, spec, anchor, scoped, force=path == "walk")
        if walk_frame is not None:
            last_path["path"] = "walk"
            return walk_frame
    if path == "jump" and not spec.key:
        # one parent per node: path doubling. Only on request: on a 10^6-node forest it
        # measured no faster than the level path (see the README).
        jump_frame = recursive_jump.try_jump(spark, spec, anchor, scoped)
        if jump_frame is not None:
            last_path["path"] = "jump"
            return jump_frame
    last_path["path"] = "levels"
    return run_levels(spark, spec, anchor, scoped)
