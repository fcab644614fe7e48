"""``sqlext serve``: a warm Spark driver for the clients of a folder: commands over Spark
Connect, ``sqlext stream`` runs, and JDBC/ODBC clients (:mod:`sqlext.serve`)."""

from __future__ import annotations

from sqlext.cli.parser import add_command
from sqlext.serve import add_arguments as add_serve_arguments
from sqlext.serve import main as serve_main
from sqlext.session_options import add_session_arguments


def add_parser(commands) -> None:
    """``sqlext serve``: its own options and the session options."""
    parser = add_command(
        commands, "serve", "keep a warm Spark for the commands, streams and JDBC clients of this folder",
        "Start a Spark driver in the background, with the settings a command's own Spark would have "
        "(sqlext's defaults, the folder's catalog, the session options given here) and Spark Connect "
        "inside it, and return once it answers. While it runs, sqlext sql, run, explain and build "
        "started in this folder attach to it and answer at once, and sqlext stream carries its run "
        "out in it; elsewhere, --remote or SPARK_REMOTE names it (sqlext serve --status prints the "
        "address). With --jdbc-port, BI tools, beeline, ODBC and PyHive connect over HiveServer2's "
        "protocol, every statement run through sqlext. The benchmarks keep Spark of their own.",
        "  sqlext serve\n  sqlext serve --driver-memory 8g --conf spark.sql.shuffle.partitions=8\n"
        "  sqlext serve --jdbc-port 10000     # then: beeline -u jdbc:hive2://localhost:10000/default "
        "-n me -p TOKEN\n"
        "  SPARK_REMOTE=\"$(sqlext serve --status)\" sqlext sql -e \"SELECT 1\"\n  sqlext serve --stop")
    add_serve_arguments(parser)
    add_session_arguments(parser, remote=False)


def main(args) -> int:
    return serve_main(args)
