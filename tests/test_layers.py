"""The package's layers, read from the code's imports (function-local ones included): each
module imports only modules of its own layer or of layers below it, the two folders side by
side (``rewrites``: text in, text out; ``udfs``: what runs inside Spark) do not import each
other, and no modules import each other in a cycle. ``rewrites`` holds rules and the pipeline
only, and the incremental engine imports nothing from it. ``sqlext.rewrite`` works without
pyspark.

Layers, bottom to top:

0. errors and the SQL sqlext reads and writes (its dialect, the builders of generated SQL
   trees): ``sqlext.errors`` and the folder ``sqlext.language``;
1. the function catalogue: ``sqlext.functions`` (arguments, their checks, change rows);
2. what the rules and the engine read off a statement: ``sqlext.analysis`` (relations and
   scopes, the self-join's match, band and edits, the rules' notes);
3. ``sqlext.rewrites`` and ``sqlext.udfs``, side by side;
4. the surfaces: the public API, the statement runner, session wiring, CLI, notebook magic,
   model runner, incremental runs and benchmarks (everything else under ``sqlext``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# where each installed package's files live (pyproject.toml maps the folders the same way)
FOLDERS = {"sqlext": ROOT / "sqlext", "sqlext.rewrites": ROOT / "rewrites", "sqlext.udfs": ROOT / "udfs"}
# each layer is folders (packages), and a module's layer is the folder it lives in
LAYERS = (("sqlext.errors", 0), ("sqlext.language", 0), ("sqlext.functions", 1), ("sqlext.analysis", 2),
          ("sqlext.rewrites", 3), ("sqlext.udfs", 3))
SIDE_BY_SIDE = 3  # the layer whose folders do not import each other


def layer(module: str) -> tuple[int, str]:
    for prefix, rank in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return rank, "base" if rank == 0 else prefix
    return 4, "surfaces"


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "sqlext" and parts[0] in ("rewrites", "udfs"):
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The project's modules that ``path`` imports anywhere in its code. ``from p import x``
    names module ``p.x`` if that is a module, else ``p``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(path, module, set(known)) - {module} for module, path in known.items()}


def test_the_layout_is_what_the_test_reads():
    found = graph()
    assert {"sqlext", "sqlext.api", "sqlext.runner", "sqlext.errors", "sqlext.rewrites.pipeline",
            "sqlext.udfs.recursive_expand", "sqlext.functions.arguments", "sqlext.analysis.self_join_match",
            "sqlext.streaming.operators.self_join"} <= set(found)
    assert "sqlext.language.dialect" in found["sqlext.rewrites.pipeline"]
    assert "sqlext.analysis.self_join_match" in found["sqlext.streaming.operators.self_join"]


def test_no_module_imports_a_layer_above_it_or_its_sibling():
    wrong = []
    for module, targets in sorted(graph().items()):
        rank, name = layer(module)
        for target in sorted(targets):
            target_rank, target_name = layer(target)
            if target_rank > rank or (target_rank == rank == SIDE_BY_SIDE and target_name != name):
                wrong.append(f"{module} ({name}) imports {target} ({target_name})")
    assert wrong == []


def test_the_engine_imports_nothing_from_the_rules():
    """The incremental engine (``sqlext.streaming``) reads statements with what lies below the
    rules (``sqlext.analysis``, ``sqlext.language``, ``sqlext.functions``), never with a module
    of ``sqlext.rewrites``: the rules are free to change how they rewrite without the engine
    noticing. The layers allow the import (the engine is a surface); this forbids it. Only the
    engine's own imports are read: it runs statements through ``sqlext.runner``, a surface that
    rewrites them, as every caller does."""
    wrong = [f"{module} imports {target}" for module, targets in sorted(graph().items())
             if module == "sqlext.streaming" or module.startswith("sqlext.streaming.")
             for target in sorted(targets) if target == "sqlext.rewrites" or target.startswith("sqlext.rewrites.")]
    assert wrong == []


def test_every_module_of_rewrites_is_a_rule_or_the_pipeline():
    """``rewrites/`` holds the pipeline and the rules, one module each: every other module there
    defines a rule the pipeline runs (a function of :func:`sqlext.rewrites.pipeline.rules`
    whose ``__module__`` it is), and every rule the pipeline runs is defined there. A helper the
    rules share belongs below them (``sqlext.analysis``, ``sqlext.functions``, ``sqlext.language``)."""
    from sqlext.rewrites.pipeline import rules

    folder = {module for module in modules() if module.startswith("sqlext.rewrites.")} - {"sqlext.rewrites.pipeline"}
    defined = {rule.__module__ for rule in rules()}
    assert sorted(folder - defined) == [], "modules of rewrites/ that define no rule the pipeline runs"
    assert sorted(defined - folder) == [], "rules the pipeline runs that are not defined in rewrites/"


def test_nothing_in_sqlext_imports_the_dbt_adapter():
    """The dbt adapter (dbt/adapters/sqlext, dbt/include/sqlext) is a surface above all of
    sqlext: it imports sqlext, never the other way round. sqlext runs without dbt installed:
    the one use of dbt itself (``sqlext build`` handing a dbt project to dbt's runner) imports
    it inside a ``try`` that catches ImportError."""
    wrong = []
    for module, path in sorted(modules().items()):
        tree = ast.parse(path.read_text())
        optional = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    for h in node.handlers):
                optional |= {id(n) for statement in node.body for n in ast.walk(statement)}
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                if name.startswith(("dbt.adapters", "dbt.include")) or \
                        (name == "dbt" or name.startswith("dbt.")) and id(node) not in optional:
                    wrong.append(f"{module} imports {name}")
    assert wrong == []


def test_the_dbt_adapter_imports_only_sqlext_surfaces_and_dbt():
    """The adapter's imports of sqlext name modules that exist."""
    known = set(modules())
    adapter = ROOT / "dbt" / "adapters" / "sqlext"
    assert adapter.is_dir() and not (ROOT / "dbt" / "__init__.py").exists()
    assert not (ROOT / "dbt" / "adapters" / "__init__.py").exists()
    for path in adapter.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlext"):
                assert node.module in known or all(f"{node.module}.{a.name}" in known for a in node.names), \
                    f"{path.name} imports {node.module}"


def test_no_import_cycles():
    edges = graph()
    cycles, state, stack = [], {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert cycles == []


def test_rewrite_works_without_pyspark(tmp_path):
    """``sqlext.rewrite`` in a process where importing pyspark fails."""
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text("raise ImportError('pyspark is hidden from this test')\n")
    script = textwrap.dedent("""
        import sqlext
        print(sqlext.rewrite(
            "SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')",
            schema={"t": {"id": "bigint", "v": "bigint", "_change_type": "string", "_commit_version": "bigint"}}))
        print(sqlext.rewrite("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
                             "SELECT * FROM r"))
        import sys
        assert "pyspark" not in sys.modules, "something imported pyspark and caught the error"
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "LAG(" in done.stdout.upper() or "WINDOW" in done.stdout.upper()
    assert "RECURSIVE_EXPAND" in done.stdout
