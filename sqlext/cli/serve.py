"""``sqlext serve``: a warm Spark (a Spark Connect server) for the commands started in a
folder (:mod:`sqlext.serve`)."""

from __future__ import annotations

from sqlext.cli.parser import add_command
from sqlext.serve import add_arguments as add_serve_arguments
from sqlext.serve import main as serve_main
from sqlext.session_options import add_session_arguments


def add_parser(commands) -> None:
    """``sqlext serve``: its own options and the session options."""
    parser = add_command(
        commands, "serve", "keep a warm Spark (Spark Connect) for the commands of this folder",
        "Start Spark's Connect server in the background, with the settings a command's own Spark "
        "would have (sqlext's defaults, the folder's catalog, the session options given here), and "
        "return once it answers. While it runs, sqlext sql, run, explain and build started in this "
        "folder attach to it and answer at once; elsewhere, --remote or SPARK_REMOTE names it "
        "(sqlext serve --status prints the address). sqlext stream and the benchmarks keep Spark of "
        "their own.",
        "  sqlext serve\n  sqlext serve --driver-memory 8g --conf spark.sql.shuffle.partitions=8\n"
        "  SPARK_REMOTE=\"$(sqlext serve --status)\" sqlext sql -e \"SELECT 1\"\n  sqlext serve --stop")
    add_serve_arguments(parser)
    add_session_arguments(parser, remote=False)


def main(args) -> int:
    return serve_main(args)
