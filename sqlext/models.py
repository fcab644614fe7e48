"""dbt-style models: a folder of ``*.sql`` files built in dependency order (``sqlext build``).

One model per file, named by its file (``models/orders.sql`` is the model ``orders``). A
model is one SELECT, written as a Jinja2 template with the simple dbt macros:

- ``{{ ref('name') }}`` reads another model (and makes this one depend on it);
- ``{{ config(materialized='view') }}`` (the default) or ``'table'``;
- ``{{ source('schema', 'name') }}`` reads a relation the session already has (a table or a
  temporary view named ``name``), ``{{ var('x', default) }}`` a value passed in ``vars``,
  ``{{ this }}`` the model's own name.

Each model is rewritten by sqlext before Spark sees it. A view model becomes a temporary view
of the session; a table model is written as Parquet under the warehouse directory (to a
temporary directory first, then moved into place, so an interrupted build never leaves a
half-written table) and read back as a temporary view, so later models and the caller's
queries read it by its name.

>>> graph = {"a": set(), "b": {"a"}, "c": {"b"}, "d": {"a"}}
>>> build_order(graph)
['a', 'b', 'c', 'd']
>>> sorted(select(graph, ["b+"]))
['b', 'c']
>>> sorted(select(graph, ["+c"]))
['a', 'b', 'c']
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from sqlext.command_session import command_session
from sqlext.errors import SqlextError, counted
from sqlext.progress import Repeating
from sqlext.runner import error_message, run_statement
from sqlext.session import ensure_installed
from sqlext.session_options import REMOTE_ENV, SessionOptions, set_command_options
from sqlext.statements import split_statements

FUNCTION = "sqlext build"
MATERIALIZATIONS = ("view", "table")
DEFAULT_WAREHOUSE = "spark-warehouse"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_warned: set[tuple[str, str]] = set()  # (model, config key) already reported as ignored


@dataclass
class Model:
    name: str
    path: Path
    source: str
    sql: str = ""  # rendered
    refs: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)

    @property
    def materialized(self) -> str:
        return self.config.get("materialized", "view")


@dataclass
class ModelResult:
    name: str
    status: str  # "OK", "ERROR", "SKIP"
    materialized: str
    seconds: float = 0.0
    rows: int | None = None
    error: str | None = None  # FILE:LINE:COL: [CLASS] message


class ModelError(Exception):
    """A failure located in a model file: the message is FILE:LINE:COL: [CLASS] message."""

    def __init__(self, path: Path, line: int, column: int, error: BaseException | str):
        self.path, self.line, self.column = path, line, column
        self.error = error
        self.error_class = getattr(error, "error_class", None)
        super().__init__(f"{path}:{line}:{column}: {error}")


# ---------------------------------------------------------------- discovery and rendering


def models_folder(directory: Path) -> Path:
    """A dbt project directory (with ``dbt_project.yml``) means its ``models/`` folder."""
    directory = Path(directory)
    if (directory / "dbt_project.yml").exists() and (directory / "models").is_dir():
        return directory / "models"
    return directory


def discover(directory: Path, vars: Mapping | None = None) -> dict[str, Model]:
    """Every ``*.sql`` under ``directory`` (subfolders too), rendered, by model name."""
    directory = models_folder(directory)
    found: dict[str, list[Path]] = {}
    for path in sorted(directory.rglob("*.sql")):
        found.setdefault(path.stem, []).append(path)
    for name, paths in found.items():
        if len(paths) > 1:
            raise SqlextError("DUPLICATE_MODEL", function=FUNCTION, name=name,
                              paths=", ".join(str(p) for p in paths))
    models = {name: Model(name, paths[0], paths[0].read_text()) for name, paths in found.items()}
    for model in models.values():
        render(model, vars or {})
    for model in models.values():
        for upstream in model.refs:
            if upstream not in models:
                line, column = _locate(model.source, rf"ref\(\s*['\"]{re.escape(upstream)}['\"]")
                raise ModelError(model.path, line, column, SqlextError(
                    "MODEL_NOT_FOUND", function=FUNCTION, what="ref", name=upstream,
                    directory=str(directory), available=sorted(models)))
    return models


def render(model: Model, vars: Mapping) -> None:
    """Render the model's template, recording its refs and config."""
    import jinja2

    refs: list[str] = []
    config: dict = {}

    def ref(*names: str) -> str:
        name = names[-1]  # ref('package', 'name') names a model of a package
        if name not in refs:
            refs.append(name)
        return name

    def source(schema: str, name: str) -> str:
        return name

    def config_(**options) -> str:
        config.update(options)
        for key in sorted(set(options) - {"materialized"}):
            if (model.name, key) not in _warned:
                _warned.add((model.name, key))
                print(f"sqlext build: model {model.name}: config {key}={options[key]!r} is not supported by this "
                      "runner and is ignored (a dbt project with the sqlext adapter supports it)", file=sys.stderr)
        return ""

    def var(name: str, default=None):
        if name in vars:
            return vars[name]
        if default is None:
            raise SqlextError("MODEL_TEMPLATE_ERROR", function=FUNCTION,
                              reason=f"var({name!r}) has no value and no default",
                              fix=f"Pass it with --vars '{name}=...' or give a default: var({name!r}, ...).")
        return default

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        template = environment.from_string(model.source)
        model.sql = template.render(ref=ref, source=source, config=config_, var=var, this=model.name,
                                    is_incremental=lambda: False)
    except jinja2.TemplateSyntaxError as error:
        raise ModelError(model.path, error.lineno or 1, 1, SqlextError(
            "MODEL_TEMPLATE_ERROR", function=FUNCTION, reason=error.message or str(error),
            fix="Fix the template syntax.")) from None
    except SqlextError as error:
        raise ModelError(model.path, 1, 1, error) from None
    except jinja2.UndefinedError as error:
        missing = re.search(r"'([^']+)' is undefined", str(error))
        line, column = _locate(model.source, re.escape(missing.group(1))) if missing else (1, 1)
        raise ModelError(model.path, line, column, SqlextError(
            "MODEL_TEMPLATE_ERROR", function=FUNCTION, reason=str(error),
            fix="sqlext supports ref, source, config, var, this and is_incremental.")) from None
    materialized = config.get("materialized", "view")
    if materialized not in MATERIALIZATIONS:
        line, column = _locate(model.source, r"materialized")
        raise ModelError(model.path, line, column, SqlextError(
            "INVALID_MODEL_CONFIG", function=FUNCTION, argument="materialized", value=repr(materialized),
            allowed="materialized='view' or materialized='table'"))
    model.refs, model.config = refs, config


def _locate(source: str, pattern: str) -> tuple[int, int]:
    match = re.search(pattern, source)
    if not match:
        return 1, 1
    line = source.count("\n", 0, match.start()) + 1
    return line, match.start() - (source.rfind("\n", 0, match.start()) + 1) + 1


# ---------------------------------------------------------------- the dependency graph


def build_order(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Models in dependency order (upstream first; ties by name). A cycle is MODEL_CYCLE."""
    pending = {name: set(ups) for name, ups in graph.items()}
    order: list[str] = []
    while pending:
        ready = sorted(n for n, ups in pending.items() if not ups - set(order))
        if not ready:
            raise SqlextError("MODEL_CYCLE", function=FUNCTION, cycle=" -> ".join(_cycle(pending)))
        order.append(ready[0])
        del pending[ready[0]]
    return order


def _cycle(pending: Mapping[str, set[str]]) -> list[str]:
    path: list[str] = []
    node = sorted(pending)[0]
    while node not in path:
        path.append(node)
        node = sorted(u for u in pending[node] if u in pending)[0]
    return path[path.index(node):] + [node]


def select(graph: Mapping[str, Iterable[str]], selectors: Iterable[str]) -> set[str]:
    """dbt's graph operators: ``name``, ``name+`` (and its dependents), ``+name`` (and its
    ancestors), ``+name+``."""
    children: dict[str, set[str]] = {n: set() for n in graph}
    for name, ups in graph.items():
        for up in ups:
            children.setdefault(up, set()).add(name)
    chosen: set[str] = set()
    for selector in selectors:
        name = selector.strip("+")
        if name not in graph:
            raise SqlextError("MODEL_NOT_FOUND", function=FUNCTION, what="--select", name=name,
                              directory="the models folder", available=sorted(graph))
        chosen.add(name)
        if selector.endswith("+"):
            chosen |= _reach(name, children)
        if selector.startswith("+"):
            chosen |= _reach(name, {n: set(u) for n, u in graph.items()})
    return chosen


def _reach(start: str, edges: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


# ---------------------------------------------------------------- building


def build(spark, directory: Path, warehouse: Path | str = DEFAULT_WAREHOUSE, selectors: Iterable[str] = (),
          vars: Mapping | None = None, out: Callable[[str], None] = print,
          err: Callable[[str], None] | None = None, progress_every: float = 10.0) -> list[ModelResult]:
    """Build the models of ``directory`` on ``spark``, in dependency order; returns a result
    per model. A failing model is reported (file, line, class) and its dependents are
    skipped; every other model is still built, and tables built before stay intact."""
    err = err or (lambda text: print(text, file=sys.stderr))
    ensure_installed(spark)
    warehouse = Path(warehouse).resolve()
    models = discover(directory, vars)
    graph = {name: set(m.refs) for name, m in models.items()}
    order = build_order(graph)
    chosen = select(graph, selectors) if selectors else set(order)
    _clean_temporaries(warehouse)

    results: list[ModelResult] = []
    failed: set[str] = set()
    todo = [name for name in order if name in chosen]
    out(f"sqlext build: {len(todo)} of {len(order)} models, warehouse {warehouse}")
    started_all = time.perf_counter()
    for index, name in enumerate(todo, 1):
        model = models[name]
        prefix = f"{index} of {len(todo)}"
        broken = [up for up in model.refs if up in failed]
        if broken:
            failed.add(name)
            results.append(ModelResult(name, "SKIP", model.materialized,
                                       error=f"upstream model {broken[0]!r} failed"))
            out(_status_line(prefix, f"SKIP {model.materialized} model {name}", f"upstream {broken[0]} failed"))
            continue
        out(f"{prefix} START {model.materialized} model {name} ({model.path})")
        started = time.perf_counter()
        with _still_running(out, name, started, progress_every):
            try:
                _ensure_upstream(spark, model, models, chosen, warehouse)
                rows = _materialize(spark, model, warehouse)
            except ModelError as error:
                failed.add(name)
                seconds = time.perf_counter() - started
                results.append(ModelResult(name, "ERROR", model.materialized, seconds, error=str(error)))
                out(_status_line(prefix, f"ERROR {model.materialized} model {name}", f"ERROR in {seconds:.2f}s"))
                err(str(error))
                continue
        seconds = time.perf_counter() - started
        results.append(ModelResult(name, "OK", model.materialized, seconds, rows))
        out(_status_line(prefix, f"OK {model.materialized} model {name}", f"{counted(rows, 'row')} in {seconds:.2f}s"))
    counts = {s: sum(r.status == s for r in results) for s in ("OK", "ERROR", "SKIP")}
    out(f"Done in {time.perf_counter() - started_all:.2f}s: "
        f"OK={counts['OK']} ERROR={counts['ERROR']} SKIP={counts['SKIP']}")
    return results


def _status_line(prefix: str, what: str, outcome: str) -> str:
    left = f"{prefix} {what} "
    return f"{left}{'.' * max(3, 60 - len(left))} [{outcome}]"


def _still_running(out, name: str, started: float, every: float) -> Repeating:
    """For a model running longer than ``every`` seconds, a line now and then saying so."""
    return Repeating(every, lambda: out(f"   ... {name} still running ({time.perf_counter() - started:.0f}s)"))


def _ensure_upstream(spark, model: Model, models: Mapping[str, Model], chosen: set[str], warehouse: Path) -> None:
    """An upstream model outside the selection is read from what an earlier build left: its
    table in the warehouse, or (a view) defined again, which runs nothing."""
    for up in model.refs:
        if up in chosen or spark.catalog.tableExists(up):
            continue
        upstream = models[up]
        _ensure_upstream(spark, upstream, models, chosen, warehouse)
        if upstream.materialized == "table":
            if not (warehouse / up).exists():
                line, column = _locate(model.source, rf"ref\(\s*['\"]{re.escape(up)}['\"]")
                raise ModelError(model.path, line, column, SqlextError(
                    "MODEL_NOT_BUILT", function=FUNCTION, name=model.name, upstream=up,
                    warehouse=str(warehouse)))
            spark.read.parquet(str(warehouse / up)).createOrReplaceTempView(up)
        else:
            _frame(spark, upstream).createOrReplaceTempView(up)


def _frame(spark, model: Model):
    """The model's rewritten query as a DataFrame; errors located in the model file."""
    statements = split_statements(model.sql)
    if not statements:
        raise ModelError(model.path, 1, 1, SqlextError(
            "EMPTY_MODEL", function=FUNCTION, fix="Write one SELECT statement in the file."))
    frame = None
    for statement in statements:
        try:
            frame = run_statement(spark, statement.text)
            frame.schema  # analyse now (a Connect session is lazy), so errors point here
        except Exception as error:  # noqa: BLE001 - only errors with a message are reported
            message = error_message(error)
            if message is None:
                raise
            raise ModelError(model.path, statement.line, statement.column,
                             error if isinstance(error, SqlextError) else message) from None
    return frame


def _materialize(spark, model: Model, warehouse: Path) -> int:
    from pyspark.errors import PySparkException

    frame = _frame(spark, model)
    statement_line = _first_statement_position(model)
    try:
        if model.materialized == "table":
            final = warehouse / model.name
            temporary = warehouse / ".tmp" / f"{model.name}-{uuid.uuid4().hex}"
            frame.write.parquet(str(temporary))
            _move_into_place(temporary, final)
            spark.read.parquet(str(final)).createOrReplaceTempView(model.name)
            return spark.table(model.name).count()
        frame.createOrReplaceTempView(model.name)
        # run the view once: a failing view is reported here, not by the models reading it
        return spark.table(model.name).count()
    except PySparkException as error:
        raise ModelError(model.path, *statement_line, error_message(error)) from None


def _first_statement_position(model: Model) -> tuple[int, int]:
    statements = split_statements(model.sql)
    return (statements[-1].line, statements[-1].column) if statements else (1, 1)


def _move_into_place(temporary: Path, final: Path) -> None:
    """Replace ``final`` by the complete ``temporary`` directory with renames only: at every
    moment ``final`` is the old table, the new one, or (between two renames) absent."""
    old = None
    if final.exists():
        old = temporary.with_name(temporary.name + ".old")
        final.rename(old)
    temporary.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _clean_temporaries(warehouse: Path) -> None:
    """Remove what an interrupted build left in ``.tmp`` (never a finished table)."""
    shutil.rmtree(warehouse / ".tmp", ignore_errors=True)
    (warehouse / ".tmp").mkdir(parents=True, exist_ok=True)


def parse_vars(items: Iterable[str]) -> dict[str, str]:
    """``--vars a=1 --vars b=x`` as a mapping."""
    result = {}
    for item in items:
        key, _, value = item.partition("=")
        result[key.strip()] = value
    return result


def dbt_arguments(project: Path, selectors: Iterable[str], vars: Mapping[str, str]) -> list[str]:
    """The ``dbt build`` arguments of ``sqlext build PROJECT [--select ...] [--vars ...]``.

    >>> args = dbt_arguments(Path("shop"), ["orders+"], {"day": "1"})
    >>> args[:3], args[args.index("--select") + 1], args[args.index("--vars") + 1]
    (['build', '--project-dir', 'shop'], 'orders+', '{"day": "1"}')
    """
    arguments = ["build", "--project-dir", str(project)]
    for selector in selectors:
        arguments += ["--select", selector]
    if vars:
        arguments += ["--vars", json.dumps(dict(vars))]
    return arguments


def profile_source(project: Path, warehouse: Path) -> tuple[Path | None, str | None]:
    """Where dbt takes its ``profiles.yml`` from, as ``(folder, generated)``: ``(None, None)``
    where dbt finds one itself or the user chose (``DBT_PROFILES_DIR``, the current folder,
    ``~/.dbt``); ``(project, None)`` where the project folder holds one (dbt alone would not look
    there from another folder); otherwise ``(None, text)``: a generated profile giving the
    project's profile name an sqlext target that writes under ``warehouse``."""
    import yaml

    if os.environ.get("DBT_PROFILES_DIR") or any(
            (folder / "profiles.yml").exists() for folder in (Path.cwd(), Path.home() / ".dbt")):
        return None, None
    if (project / "profiles.yml").exists():
        return project, None
    name = (yaml.safe_load((project / "dbt_project.yml").read_text()) or {}).get("profile") or "default"
    warehouse = warehouse.resolve()
    target = {"type": "sqlext", "schema": "default", "threads": 1, "server_side_parameters": {
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            "jdbc:derby:;databaseName=" + str(warehouse / "metastore_db") + ";create=true",
    }}
    return None, yaml.safe_dump({name: {"target": "sqlext", "outputs": {"sqlext": target}}}, sort_keys=False)


def _hand_to_dbt(args) -> int:
    """A dbt project is dbt's to build: run ``dbt build`` in this process through the sqlext
    adapter (every statement rewritten by sqlext), so that all of dbt applies (its
    ``dbt_project.yml``, macros, packages, seeds, data tests, materializations). dbt reports
    what fails while it builds; what it refuses before it starts (an argument, a missing folder)
    it only returns, so that is printed here."""
    try:
        from dbt.cli.main import dbtRunner
        from dbt_common.exceptions import DbtRuntimeError
    except ImportError:
        print(f"sqlext build: {args.models} is a dbt project (it has dbt_project.yml), which sqlext builds with "
              "dbt and the sqlext adapter: install them with pip install \"sqlext[dbt]\", then run this again "
              "(or run dbt build with a profile of type: sqlext).", file=sys.stderr)
        return 1
    arguments = dbt_arguments(args.models, args.select, parse_vars(args.vars))
    folder, profile = profile_source(args.models, args.warehouse)
    with tempfile.TemporaryDirectory(prefix="sqlext-profiles-") as profiles:
        if profile is not None:
            folder = Path(profiles)
            (folder / "profiles.yml").write_text(profile)
            print(f"sqlext build: no profiles.yml found; building with the sqlext adapter, tables under "
                  f"{args.warehouse.resolve()}")
        elif folder is not None:
            print(f"sqlext build: building with the profiles.yml in {args.models} (its target says where "
                  "tables go)")
        result = dbtRunner().invoke(arguments + ([] if folder is None else ["--profiles-dir", str(folder)]))
    if result.exception is not None and not isinstance(result.exception, DbtRuntimeError):
        print(SqlextError("DBT_REFUSED", function=FUNCTION, path=str(args.models),
                          reason=str(result.exception).rstrip(".")), file=sys.stderr)
    return 0 if result.success else 1


def main(args) -> int:
    """``sqlext build`` (called by the CLI): a dbt project goes to dbt (with the sqlext
    adapter); a plain folder of models is built here."""
    options = getattr(args, "session", None) or SessionOptions()
    if (args.models / "dbt_project.yml").exists():
        set_command_options(options)  # for the adapter, which starts the session in this process
        os.environ.pop(REMOTE_ENV, None)  # on Spark of its own: PySpark would start a Connect client instead
        try:
            return _hand_to_dbt(args)
        finally:
            set_command_options(None)
    folder = models_folder(args.models)
    if not folder.is_dir():
        print(SqlextError("PATH_NOT_FOUND", function=FUNCTION, what="folder", path=str(args.models),
                          fix="Give the folder that holds the *.sql models (or a dbt project)."), file=sys.stderr)
        return 1
    if not any(folder.rglob("*.sql")):
        print(SqlextError("NO_MODELS", function=FUNCTION, path=str(args.models)), file=sys.stderr)
        return 1
    try:
        discover(args.models, parse_vars(args.vars))  # report template errors before Spark starts
    except (ModelError, SqlextError) as error:
        print(str(error), file=sys.stderr)
        return 1
    spark = command_session(options, FUNCTION)
    try:
        results = build(spark, args.models, args.warehouse, args.select, parse_vars(args.vars),
                        progress_every=args.progress_every)
    except (ModelError, SqlextError) as error:
        print(str(error), file=sys.stderr)
        return 1
    return 0 if all(r.status == "OK" for r in results) else 1
