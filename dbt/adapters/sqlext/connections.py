"""Profile fields and connections of the sqlext adapter.

A sqlext profile is a dbt-spark profile whose connection method is ``session`` (Spark runs in
dbt's own process, where sqlext can rewrite each statement): ``type: sqlext`` and a
``schema`` are enough. ``server_side_parameters`` are Spark settings for the session, as in
dbt-spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.spark.connections import (
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkCredentials,
)
from dbt_common.exceptions import DbtConfigError

from dbt.adapters.sqlext.session import SqlextConnection, SqlextSessionConnectionWrapper


@dataclass
class SqlextCredentials(SparkCredentials):
    # The session method is the only one: sqlext rewrites statements on the session of dbt's
    # own process. ``host`` names nothing here; dbt-spark requires it, so it has a default.
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    host: Optional[str] = "localhost"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method != SparkConnectionMethod.SESSION:
            raise DbtConfigError(
                f"The sqlext adapter runs Spark in dbt's own process (method: session); "
                f"got method: {self.method}. Remove the method line, or use type: spark for "
                f"a remote Spark without sqlext's rewrites."
            )

    @property
    def type(self) -> str:
        return "sqlext"


class SqlextConnectionManager(SparkConnectionManager):
    TYPE = "sqlext"

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds = connection.credentials
        connection.handle = SqlextSessionConnectionWrapper(
            SqlextConnection(server_side_parameters=creds.server_side_parameters)
        )
        connection.state = ConnectionState.OPEN  # type: ignore[assignment]
        return connection
