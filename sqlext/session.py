"""sqlext on a Spark session: the embedded local session with sqlext installed
(:func:`local_session`), installing sqlext on a session of one's own (:func:`install`,
:func:`ensure_installed`), and asking a session about relations (analysis only, nothing runs).

The embedded engine's settings and start are :mod:`sqlext.local_spark` (its
:func:`~sqlext.local_spark.local_builder` is importable from here too, as the docs show it);
the session options of the commands and where a command's session runs are
:mod:`sqlext.session_options` and :mod:`sqlext.command_session`.

pyspark is imported where it is used: ``import sqlext`` imports this module, and
``sqlext.rewrite`` works where pyspark is missing.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.functions import catalogue
from sqlext.local_spark import local_builder, quiet_python_logs, quiet_start
from sqlext.spark_errors import install_error_hooks

INSTALLED_FLAG = "spark.sqlext.installed"


def local_session(app_name: str = "sqlext", conf: dict[str, str] | None = None, **options):
    """Start (or reuse) the embedded local session and install sqlext on it.

    ``conf`` holds further Spark settings (``--conf key=value`` on the command line); they
    are applied after the embedded defaults, so they override them.
    """
    builder = local_builder(app_name, **options)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = quiet_start(builder)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_python_logs()
    return install(spark)


def install(spark):
    """Register sqlext's table functions on ``spark`` and return it. From then on, an error
    of sqlext's that Spark raises in this process is raised as ``SqlextError``
    (:mod:`sqlext.spark_errors`)."""
    install_error_hooks(spark)
    register_table_functions(spark)
    spark.conf.set(INSTALLED_FLAG, "true")
    return spark


def ensure_installed(spark):
    """Install sqlext on ``spark`` unless it already is; return it. The error hooks are
    per process, and a Spark Connect server's session may have been installed on by another
    client: they are installed in any case (once)."""
    if spark.conf.get(INSTALLED_FLAG, "false") != "true":
        install(spark)
    else:
        install_error_hooks(spark)
    return spark


def register_table_functions(spark) -> None:
    """Register, under its name, each function of the catalogue that has a Python table function."""
    from pyspark.sql.functions import udtf

    for function in catalogue.functions():
        if function.table_function is not None:
            spark.udtf.register(function.name, udtf(function.part("table_function"), useArrow=True))


class SparkRelations:
    """Relations answered by a Spark session: it analyses queries, never runs them."""

    def __init__(self, spark):
        self._spark = spark

    def columns(self, query: str, relation: exp.Expression) -> list[str] | None:
        schema = self._schema(query)
        return None if schema is None else schema.fieldNames()

    def expression_type(self, query: str, expression: str) -> str | None:
        schema = self._schema(f"SELECT ({expression}) AS __sx_value FROM ({query})")
        if schema is None:
            return None
        return schema.fields[0].dataType.simpleString()

    def size_in_bytes(self, query: str) -> int | None:
        from pyspark.errors import PySparkException

        try:
            frame = self._spark.sql(query)
            return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
        except (PySparkException, AttributeError, ValueError):
            return None  # no estimate (for example on a Spark Connect session)

    def _schema(self, query: str):
        from pyspark.errors import PySparkException

        try:
            return self._spark.sql(query).schema
        except PySparkException:
            # Let the statement itself report the problem when it runs.
            return None
