"""Account balances kept in a Delta table whose change data feed is on, read by sqlext: the
change feed of "accounts in credit" as a batch query over the table's whole feed, a range of
its commits with table_changes, and incremental runs that each read only the commits made
since the last run. The table is written with deltalake (delta-rs), as a job without Spark's
Delta Lake would write it.

    pip install "sqlext[delta]"
    python sql_examples/delta_accounts.py [FOLDER]

FOLDER (a new temporary folder by default) receives the table, the runs' checkpoint and their
output.
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa

import sqlext

ACCOUNTS = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64())])


def filter_sql(table: str) -> str:
    return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({table}), key => 'id', "
            "predicate => 'balance >= 0')")


def open_accounts(path: str) -> None:
    """Version 0: the table, with its change data feed on; version 1: three accounts open."""
    from deltalake import write_deltalake

    write_deltalake(path, ACCOUNTS.empty_table(), configuration={"delta.enableChangeDataFeed": "true"})
    rows = [{"id": 1, "owner": "alice", "balance": 120}, {"id": 2, "owner": "bob", "balance": -40},
            {"id": 3, "owner": "carol", "balance": 15}]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=ACCOUNTS), mode="append")


def later_commits(path: str) -> None:
    """Version 2: alice spends; version 3: bob pays off his debt; version 4: carol overdraws;
    version 5: bob closes his account."""
    from deltalake import DeltaTable

    DeltaTable(path).update(updates={"balance": "balance - 40"}, predicate="id = 1")
    DeltaTable(path).update(updates={"balance": "10"}, predicate="id = 2")
    DeltaTable(path).update(updates={"balance": "-25"}, predicate="id = 3")
    DeltaTable(path).delete(predicate="id = 2")


def main(spark, folder: str) -> dict:
    """Runs the example in ``folder``, printing each result; returns the rows of the batch
    query and of the incremental runs."""
    from pyspark.sql import functions as F

    from sqlext.streaming import run_available_now

    path = f"{folder}/accounts"
    table = f"delta.`{path}`"
    options = dict(checkpoint=f"{folder}/checkpoint", output=f"{folder}/out")

    open_accounts(path)
    run_available_now(spark, filter_sql(f"STREAM({table})"), **options)  # run 1: version 1
    later_commits(path)
    run_available_now(spark, filter_sql(f"STREAM({table})"), **options)  # run 2: versions 2 to 5

    print("-- the accounts in credit, as they changed (the batch query over the whole feed)")
    batch = sqlext.sql(spark, filter_sql(table) + " ORDER BY _commit_version, id, _change_type DESC")
    batch.show()
    print("-- what commits 2 and 3 changed in the table itself")
    sqlext.sql(spark, f"SELECT * FROM table_changes('{path}', 2, 3) ORDER BY _commit_version, id, "
                      "_change_type DESC").show()
    print("-- the two incremental runs' output: the same rows as the batch query")
    runs = spark.read.parquet(options["output"]).orderBy("_commit_version", "id", F.desc("_change_type"))
    runs.show()
    return {"batch": [r.asDict() for r in batch.collect()], "runs": [r.asDict() for r in runs.collect()]}


if __name__ == "__main__":
    from sqlext.session import local_session

    main(local_session(), sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sqlext-delta-"))
