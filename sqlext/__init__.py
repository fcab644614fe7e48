"""sqlext: Kafka Streams table semantics for Spark SQL.

>>> import sqlext
>>> "CHANGELOG_FILTER" in sqlext.rewrite(
...     "SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
True

(Without a session or a schema the input's columns are unknown, so the call is kept for the
registered table function; with ``schema=`` it is expanded into native SQL.)
"""

from __future__ import annotations

from sqlext.api import explain, install, rewrite, sql
from sqlext.errors import SqlextError
from sqlext.runner import run_statement
from sqlext.streaming import stream

__all__ = ["SqlextError", "install", "rewrite", "sql", "explain", "stream", "run_statement", "load_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    """``%load_ext sqlext``: the ``%%sqlext`` cell magic (see ``sqlext.magic``)."""
    from sqlext.magic import load_ipython_extension as load

    load(ipython)
