"""``sqlext --help`` as a user reads it: every command and every option says what it is for,
each command shows examples and its defaults, and ``sqlext bench NAME --help`` lists only
that benchmark's options. Every ``sqlext bench ...`` line the README, the docs and the code's
docstrings show still parses."""

import argparse
import re
from pathlib import Path

import pytest

from sqlext.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) for the parser and every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


def test_the_commands_include_each_benchmark():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"run", "sql", "explain", "build", "stream", "bench"} <= names
    assert {f"bench {b}" for b in ("filter", "fk", "selfjoin", "scale", "recursion", "incremental")} <= names


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[" ".join(p) or "sqlext" for p, _ in COMMANDS])
def test_every_command_and_option_has_a_description(path, parser, capsys):
    assert parser.description, path
    for action in parser._actions:
        assert action.help, (path, action.option_strings or action.dest)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help, (path, choice.dest)
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sqlext {' '.join(path)}".rstrip())
    assert "examples:\n" in out
    # every default worth showing is shown, once
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
            assert f"(default: {action.default})" in " ".join(out.split()), (path, action.dest)


BENCH_OPTIONS = {
    "filter": {"--rows", "--runs"},
    "fk": {"--left", "--right", "--runs"},
    "selfjoin": {"--rows", "--runs", "--native-runs", "--native-limit"},
    "scale": {"--sizes", "--runs", "--plot"},
    "recursion": {"--nodes", "--depth", "--runs", "--native-chain-runs", "--forest-only", "--path", "--floor",
                  "--levels-only"},
    "serve": {"--runs"},
    "incremental": {"--function", "--rows", "--keys", "--left", "--right", "--nodes", "--percent", "--runs",
                    "--path", "--uri", "--regions", "--buckets", "--rescale", "--catch-up", "--max-batch-rows"},
}


# every command that starts Spark takes these (sqlext.session_options), a benchmark too
SESSION_OPTIONS = {"--master", "--conf", "--packages", "--jars", "--driver-memory", "--catalog"}


@pytest.mark.parametrize("benchmark", sorted(BENCH_OPTIONS))
def test_bench_help_lists_only_that_benchmarks_options(benchmark, capsys):
    with pytest.raises(SystemExit):
        main(["bench", benchmark, "--help"])
    out = capsys.readouterr().out
    listed = set(re.findall(r"^\s+(--[a-z-]+)", out, re.MULTILINE)) - {"--help"}
    assert listed == BENCH_OPTIONS[benchmark] | SESSION_OPTIONS


def _bench_lines() -> list[str]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "sqlext").rglob("*.py"))]
    lines = set()
    for path in texts:
        for match in re.finditer(r"sqlext (bench [a-z]+(?: --?[a-z-]+(?: [\w.,/]+)?)*)", path.read_text()):
            lines.add(match.group(1))
    return sorted(lines)


BENCH_LINES = _bench_lines()


def test_the_bench_lines_are_found():
    assert len({line.split()[1] for line in BENCH_LINES}) == len(BENCH_OPTIONS)


@pytest.mark.parametrize("line", BENCH_LINES)
def test_every_bench_line_shown_to_users_still_parses(line):
    # placeholders (N, M, A,B,C) stand for numbers
    argv = ["1" if re.fullmatch(r"[A-Z](,[A-Z])*", word) else word for word in line.split()]
    if "--help" in argv:
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 0
        return
    args = build_parser().parse_args(argv)
    assert args.command == "bench" and args.what == argv[1]


def test_sql_help_names_every_way_out_of_the_shell(capsys):
    """``sqlext sql --help`` names each word that leaves the shell (spark-sql's and psql's), and Ctrl-D."""
    from sqlext.shell import EXIT_WORDS

    with pytest.raises(SystemExit):
        main(["sql", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for word in EXIT_WORDS:
        assert (f"{word};" if word.isalpha() else word) in out, word
    assert "Ctrl-D" in out


@pytest.mark.parametrize("path, parser", COMMANDS[1:], ids=[" ".join(p) for p, _ in COMMANDS[1:]])
def test_every_command_ends_its_help_with_examples_of_itself(path, parser, capsys):
    """Each command's help ends with an examples section whose first example runs that command."""
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    examples = capsys.readouterr().out.split("\nexamples:\n")
    assert len(examples) == 2, path
    assert examples[1].splitlines()[0].lstrip().startswith(f"sqlext {' '.join(path)}"), path
