"""``sqlext build``: a folder of dbt-style models, or a dbt project, built in dependency order
(:mod:`sqlext.models`)."""

from __future__ import annotations

from pathlib import Path

from sqlext.cli.parser import add_command
from sqlext.models import main as build_main
from sqlext.session_options import add_session_arguments


def add_parser(commands) -> None:
    """``sqlext build MODELS_DIR``."""
    parser = add_command(
        commands, "build", "build a folder of dbt-style models in dependency order",
        "Build models in dependency order. A dbt project (a folder with dbt_project.yml) runs "
        "through dbt and the sqlext adapter; any other folder through sqlext's own small runner "
        "(one SELECT per *.sql file, ref('name') between them).",
        "  sqlext build sql_examples/models --warehouse /tmp/sqlext-warehouse\n"
        "  sqlext build my_dbt_project --select orders+ --vars day=2024-05-01")
    parser.add_argument("models", type=Path, metavar="MODELS_DIR",
                        help="a folder of *.sql models, or a dbt project")
    parser.add_argument("--warehouse", type=Path, default=Path("spark-warehouse"),
                        help="where table models are written as Parquet")
    parser.add_argument("--select", action="append", default=[],
                        help="name, name+ (and its dependents), +name (and its ancestors); repeatable")
    parser.add_argument("--vars", action="append", default=[], metavar="KEY=VALUE",
                        help="a value for var('KEY'); repeatable")
    parser.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                        help="seconds between 'still running' lines for a long model (0: off)")
    add_session_arguments(parser, what="a folder of models (a dbt project runs on dbt's own session)")


def main(args) -> int:
    return build_main(args)
