"""Start Spark's Thrift JDBC/ODBC server on a session with sqlext installed (single-session
mode, so JDBC clients see the session's registered functions and temporary views), run
statements through beeline, the JDBC client that ships with PySpark, and print each one's
output. Run by tests/surfaces/test_jdbc.py in its own process: ``python jdbc_server.py PORT WAREHOUSE``."""

import os
import subprocess
import sys
import time

import pyspark

import sqlext
from sqlext.session import local_builder

STATEMENTS = [
    "SELECT * FROM CHANGELOG_FILTER(input => TABLE(accounts), key => 'id', predicate => 'balance >= 0') "
    "ORDER BY _commit_version, id",
    "SELECT * FROM FK_JOIN(left => TABLE(accounts), right => TABLE(accounts), left_key => 'id', "
    "foreign_key => 'id', right_key => 'id')",
]


def main(port: str, warehouse: str) -> None:
    spark = (local_builder("sqlext-jdbc").config("spark.sql.hive.thriftServer.singleSession", "true")
             .config("hive.server2.thrift.port", port).config("spark.sql.warehouse.dir", warehouse)
             .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                     f"jdbc:derby:;databaseName={warehouse}/metastore_db;create=true")
             .enableHiveSupport().getOrCreate())
    sqlext.install(spark)
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW accounts(id, balance, _change_type, _commit_version) AS VALUES "
              "(1, 10, 'insert', 1), (1, -3, 'update_postimage', 2), (2, 5, 'insert', 2)")
    spark._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())
    beeline = os.path.join(os.path.dirname(pyspark.__file__), "bin", "beeline")
    for statement in STATEMENTS:
        for attempt in range(30):  # the server takes a moment to listen
            done = subprocess.run([beeline, "-u", f"jdbc:hive2://localhost:{port}", "--silent=true",
                                   "--outputformat=csv2", "-e", statement], capture_output=True, text=True,
                                  timeout=300)
            if "Connection refused" not in done.stdout + done.stderr:
                break
            time.sleep(1)
        print("=== STATEMENT")
        print(done.stdout.strip())
        print(done.stderr.strip())
    sys.stdout.flush()
    os._exit(0)  # the server's threads would keep the process alive


if __name__ == "__main__":
    main(*sys.argv[1:])
