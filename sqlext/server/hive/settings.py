"""The JDBC endpoint's own setting, ``sqlext.jdbc.showTables``: the shape of ``SHOW TABLES``.

``hive`` (the default) gives Hive's shape, one column of names (``tab_name``), which HiveServer2's
clients expect: beeline prints it as Hive's does, and PyHive's SQLAlchemy dialect (Superset's
``hive://``) reads its first column as the table names. ``spark`` gives Spark's own shape
(``namespace``, ``tableName``, ``isTemporary``). The catalog calls (JDBC's ``getTables``, which
DBeaver, Tableau and beeline's ``!tables`` use) do not depend on it.

It is set for the whole server (``sqlext serve --conf sqlext.jdbc.showTables=spark``), for a
connection (a JDBC URL's ``?sqlext.jdbc.showTables=...``, PyHive's ``configuration=``), or in a
session (``SET sqlext.jdbc.showTables=spark``; ``RESET`` goes back to the server's). A session
keeps it in its Spark settings, where ``SET`` finds it. No pyspark here: ``sqlext serve``
checks a ``--conf`` before it starts Spark.
"""

from __future__ import annotations

from sqlext.errors import SqlextError

SHOW_TABLES = "sqlext.jdbc.showTables"
HIVE, SPARK = "hive", "spark"
DEFAULT_SHOW_TABLES = HIVE


def show_tables_shape(value: str | None, function: str = "sqlext serve") -> str:
    """``hive`` or ``spark``, the shape a value of the setting asks for (any case; None: the
    default), or ``[INVALID_SETTING]``.

    >>> show_tables_shape(None), show_tables_shape(" Spark ")
    ('hive', 'spark')
    """
    if value is None:
        return DEFAULT_SHOW_TABLES
    shape = value.strip().lower()
    if shape not in (HIVE, SPARK):
        raise SqlextError("INVALID_SETTING", function=function, setting=SHOW_TABLES, value=repr(value),
                          expected=f"'{HIVE}' or '{SPARK}'", example=SPARK,
                          default="Hive's shape of SHOW TABLES (one column, tab_name)")
    return shape


def is_show_tables_key(key: str) -> bool:
    """Whether a connection's configuration key names the setting (``sqlext.jdbc.showTables``,
    ``set:hiveconf:sqlext.jdbc.showTables`` from a JDBC URL, ``set:hivevar:...``)."""
    return key.rpartition(":")[2] == SHOW_TABLES
