"""The adapter's version, which dbt reads from here: the installed sqlext's."""

from importlib.metadata import version as _version

version = _version("sqlext")
