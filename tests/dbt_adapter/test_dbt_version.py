"""Which sqlext adapter dbt sees: the version dbt prints for it ("Registered adapter:
sqlext=..." in every dbt command, and ``dbt --version``'s list of plugins) is the installed
sqlext's. No dbt command runs here: dbt's own functions are asked."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

import dbt.adapters.sqlext


def test_dbt_registers_the_adapter_with_sqlexts_version():
    from dbt.adapters.factory import FACTORY

    assert FACTORY._adapter_version("sqlext") == f"={version('sqlext')}"


def test_dbt_version_lists_the_adapter_where_its_files_are_installed(monkeypatch):
    """``dbt --version`` looks for ``dbt/adapters/*/__version__.py`` in dbt's own adapters
    folder, where a regular install (``pip install .``) puts sqlext's; an editable install keeps
    them in the clone (docs/dbt.md says so). Here dbt looks in both places."""
    from dbt import version as dbt_version

    installed = importlib.util.find_spec("dbt.adapters")
    clone = str(Path(dbt.adapters.sqlext.__file__).resolve().parent.parent)
    spec = importlib.machinery.ModuleSpec("dbt.adapters", None, is_package=True)
    spec.submodule_search_locations = [*installed.submodule_search_locations, clone]
    real = importlib.util.find_spec
    monkeypatch.setattr(dbt_version.importlib.util, "find_spec",
                        lambda name, *a: spec if name == "dbt.adapters" else real(name, *a))
    plugins = dict(dbt_version._get_dbt_plugins_info())
    assert plugins.get("sqlext") == version("sqlext")
    assert "spark" in plugins
