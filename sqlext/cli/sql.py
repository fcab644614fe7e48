"""``sqlext sql``: a spark-sql style shell whose statements sqlext rewrites (:mod:`sqlext.shell`)."""

from __future__ import annotations

from sqlext.cli.parser import add_command
from sqlext.session_options import add_session_arguments
from sqlext.shell import add_arguments as add_shell_arguments
from sqlext.shell import main as shell_main


def add_parser(commands) -> None:
    """``sqlext sql``: the shell's options and the session options."""
    parser = add_command(
        commands, "sql", "a spark-sql style shell: a prompt, -e SQL or -f FILE",
        "A shell in the manner of spark-sql whose statements sqlext rewrites. Without -e or -f it "
        "prompts; ';' ends a statement; exit;, quit;, \\q or Ctrl-D leave; Ctrl-C cancels the running "
        "statement.",
        '  sqlext sql\n  sqlext sql -e "SELECT 1 AS x"\n  sqlext sql -S -f sql_examples/changelog_filter.sql')
    add_shell_arguments(parser)
    add_session_arguments(parser, what="the statements")


def main(args) -> int:
    return shell_main(args)
