"""What every command's parser is made with: the layout of its help, and a subcommand with a
one-line summary, a description and examples."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions, keeps the examples' line breaks, and shows each option's default
    where it has one worth showing (not None, False or an empty list)."""

    def _fill_text(self, text, width, indent):
        if text.startswith(("examples:", "functions:")):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def add_command(commands, name: str, summary: str, description: str, examples: str):
    """A subcommand with a one-line summary (in ``sqlext --help``), a description and examples."""
    return commands.add_parser(name, help=summary, description=description, epilog=f"examples:\n{examples}",
                               formatter_class=HelpFormatter)
