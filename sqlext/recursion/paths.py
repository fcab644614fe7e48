"""The executor of ``RECURSIVE_EXPAND``: chooses the path that fits a recursion (the graph
walk, :mod:`sqlext.recursion.walk`; path doubling, :mod:`sqlext.recursion.jump`; or level by
level, :mod:`sqlext.recursion.levels`; see :mod:`sqlext.udfs.recursive_expand`) and runs it,
returning its result as a DataFrame. The path taken is left in :data:`last_path`.

:func:`choose_path` is the decision alone, in words, as ``sqlext explain`` shows it;
:func:`expand` runs what it chose, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sqlext.functions.recursive_expand import DEFAULT_ROW_LIMIT, FUNCTION, ROW_LIMIT_CONF, RecursiveSpec
from sqlext.errors import SqlextError
from sqlext.recursion import jump as recursive_jump
from sqlext.recursion import walk as recursive_walk
from sqlext.recursion.levels import plan_levels, run_levels

__all__ = ["PathChoice", "choose_path", "expand", "last_path"]

PATH_CONF = "spark.sqlext.recursion.path"

last_path: dict = {}  # the path the last expand() took: 'walk', 'jump' or 'levels'


@dataclass
class PathChoice:
    """The path a recursion takes (``walk``, ``jump`` or ``levels``), why (``why``; ``passed``:
    why each faster path before it does not fit), and ``run``, which runs it and returns the
    result."""

    name: str
    path: str
    why: str
    run: Callable[[], object]
    passed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for ``sqlext explain``."""
        titles = {"walk": "as a graph walk", "jump": "by path doubling", "levels": "level by level"}
        text = f"recursion {self.name} runs {titles[self.path]}: {self.why}"
        if self.passed:
            text += f" ({'; '.join(self.passed)})"
        return text


def choose_path(spark, spec: RecursiveSpec, scoped=None, path: str | None = None) -> PathChoice:
    """The path :func:`expand` takes for ``spec``, and why. Only Spark's analysis (and its size
    estimate of a relation the walk would collect) runs here; nothing is computed.

    ``scoped`` puts a query's text inside the CTEs that anchor and step read; ``path``
    ('auto', 'walk', 'jump' or 'levels') defaults to ``spark.sqlext.recursion.path``.
    """
    path = path or spark.conf.get(PATH_CONF, "auto")
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

    def levels():
        last_path["path"] = "levels"
        return run_levels(spark, spec, anchor, scoped)

    passed = [f"{PATH_CONF} is {path}"] if path in ("levels", "jump") else []
    if path not in ("levels", "jump"):
        force = path == "walk"
        walk = recursive_walk.plan_walk(spark, spec, anchor, scoped, force=force)
        if isinstance(walk, recursive_walk.Walk):
            def run_walk():
                frame = recursive_walk.run_walk(spark, spec, anchor, walk, force=force)
                if frame is None:  # the relation turned out too large to collect
                    return levels()
                last_path["path"] = "walk"
                return frame

            return PathChoice(spec.name, "walk", walk.why, run_walk)
        passed.append(f"no graph walk, {walk}")
    if path == "jump" and not spec.key:
        # one parent per node: path doubling. Only on request: it has not measured faster
        # than the level path (docs/performance.md, "Recursion at scale").
        jump = recursive_jump.plan_jump(spark, spec, anchor, scoped)
        if not isinstance(jump, str):
            def run_jump():
                frame = recursive_jump.run_jump(spark, spec, jump[0], anchor, jump[1])
                if frame is None:  # the key is not unique on the data
                    return levels()
                last_path["path"] = "jump"
                return frame

            return PathChoice(spec.name, "jump",
                              f"{PATH_CONF} asks for it and the step follows one column of its joined "
                              "relation per level; if that relation's key proves not unique when it "
                              "runs, the recursion runs level by level", run_jump)
        passed.append(f"no path doubling, {jump}")
    chosen = plan_levels(spark, spec, anchor, scoped)

    def run_chosen_levels():
        last_path["path"] = "levels"
        return chosen.run()

    return PathChoice(spec.name, "levels", chosen.why, run_chosen_levels, passed)


def expand(spark, spec: RecursiveSpec, scoped=None, path: str | None = None):
    """The recursion's result as a DataFrame: computed and checkpointed level by level, or a
    lazy graph walk (whose errors surface when the result is read), on the path
    :func:`choose_path` chooses; the path that ran is left in ``last_path['path']``."""
    return choose_path(spark, spec, scoped, path).run()
