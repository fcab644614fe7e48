"""The sqlext dbt adapter: dbt-spark's ``session`` method, with every statement dbt sends
rewritten by sqlext and sqlext's table functions installed on the session.

dbt finds it as ``dbt.adapters.sqlext`` when a profile says ``type: sqlext``. Its macros are
in ``dbt.include.sqlext``; everything else (relations, columns, the materializations) comes
from the spark adapter it depends on.
"""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.sqlext.connections import SqlextConnectionManager, SqlextCredentials  # noqa: F401
from dbt.adapters.sqlext.impl import SqlextAdapter
from dbt.include import sqlext

Plugin = AdapterPlugin(
    adapter=SqlextAdapter,  # type: ignore[arg-type]
    credentials=SqlextCredentials,
    include_path=sqlext.PACKAGE_PATH,
    dependencies=["spark"],
)
