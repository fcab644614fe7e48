"""The progress line of ``sqlext run``, ``sql`` and ``stream`` (sqlext/progress.py): on a
terminal it says how long the work has run and what Spark is doing, rewritten in place, and it
is cleared before the results print; where standard error is not a terminal it says nothing.
The line is checked on a stand-in terminal (a text stream that says it is one, read back as a
terminal shows it) with a stand-in status tracker, and once with Spark's own."""

from __future__ import annotations

import io
import re
import time
from collections import namedtuple
from pathlib import Path

import pytest

from sqlext.progress import Repeating, StatusLine, spark_status, stages_text

Stage = namedtuple("Stage", "stageId numTasks numActiveTasks numCompletedTasks")


@pytest.fixture(autouse=True)
def terminal_type(monkeypatch):
    """A terminal that can erase a line, whatever the one the tests run from (CI's may be dumb)."""
    monkeypatch.setenv("TERM", "xterm-256color")


class Terminal(io.StringIO):
    """Standard error as a terminal: what is written to it, and the line it shows now."""

    def isatty(self) -> bool:
        return True

    def lines(self) -> list[str]:
        """The lines as a terminal shows them: ``\\r`` goes back to the start of the line,
        what is written then overwrites what was there, and ``ESC [K`` erases what follows."""
        shown = []
        for written in self.getvalue().split("\n"):
            line: list[str] = []
            at = 0
            for part in re.split(r"(\r|\x1b\[K)", written):
                if part == "\r":
                    at = 0
                elif part == "\x1b[K":
                    del line[at:]
                else:
                    line[at:at + len(part)] = part
                    at += len(part)
            shown.append("".join(line))
        return shown


class Tracker:
    """Spark's status tracker, standing in: the stages that run now."""

    def __init__(self, *stages: Stage):
        self.stages = {stage.stageId: stage for stage in stages}

    def getActiveStageIds(self):
        return list(self.stages)

    def getStageInfo(self, stage):
        return self.stages.get(stage)


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_line_says_the_time_and_the_stages_rewritten_in_place_and_is_cleared_at_the_end():
    terminal, clock = Terminal(), Clock()
    tracker = Tracker(Stage(7, 8, 2, 5))
    with StatusLine(lambda: stages_text(tracker), terminal, first=60, clock=clock, width=200) as line:
        clock.now += 12.4
        line.draw()
        assert terminal.lines() == ["-- running for 12 s: stage 7: 5/8 tasks done, 2 running"]
        tracker.stages = {9: Stage(9, 4, 1, 3), 8: Stage(8, 200, 0, 0)}
        clock.now += 1
        line.draw()
        assert terminal.lines() == ["-- running for 13 s: stages 8, 9: 3/204 tasks done, 1 running"]
        tracker.stages = {}  # between stages (planning, the driver's own work): the time alone
        line.draw()
        assert terminal.lines() == ["-- running for 13 s"]
        assert "\n" not in terminal.getvalue()  # one line, rewritten: never a new one
    assert terminal.lines() == [""]  # cleared: the results print where it was


def test_the_line_fits_the_terminal_and_survives_a_status_that_fails():
    terminal, clock = Terminal(), Clock()

    def failing():
        raise RuntimeError("the JVM is stopping")

    with StatusLine(lambda: "stage 3: " + "x" * 100, terminal, first=60, clock=clock, width=40) as line:
        line.draw()
        assert terminal.lines() == [("-- running for 0 s: stage 3: " + "x" * 100)[:39]]  # a wrapped line could not be rewritten
        line.status = failing
        clock.now += 2
        line.draw()
        assert terminal.lines() == ["-- running for 2 s"]
    assert terminal.lines() == [""]


def test_the_line_shows_after_a_while_on_its_own_and_nothing_is_drawn_after_the_end():
    terminal = Terminal()
    with StatusLine(lambda: "stage 1: 0/2 tasks done, 2 running", terminal, first=0.05, every=0.02, width=200):
        deadline = time.monotonic() + 10
        while "stage 1" not in terminal.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert terminal.lines() == ["-- running for 0 s: stage 1: 0/2 tasks done, 2 running"]
    written = terminal.getvalue()
    time.sleep(0.1)
    assert terminal.getvalue() == written and terminal.lines() == [""]


def test_a_quick_statement_shows_no_line():
    terminal = Terminal()
    with StatusLine(lambda: "stage 1: 0/1 tasks done, 1 running", terminal, first=5, every=0.01):
        pass
    assert terminal.getvalue() == ""


def test_nothing_where_standard_error_is_not_a_terminal():
    log = io.StringIO()  # a pipe, a file, a CI log
    with StatusLine(lambda: "stage 1: 0/1 tasks done, 1 running", log, first=0, every=0.01) as line:
        time.sleep(0.05)
        line.draw()
        with line.above():
            log.write("-- batch 0: read 1 file, 2 rows; wrote 1 file, 2 rows\n")
    assert log.getvalue() == "-- batch 0: read 1 file, 2 rows; wrote 1 file, 2 rows\n"  # no \r, no progress


def test_nothing_on_a_dumb_terminal(monkeypatch):
    """``TERM=dumb`` (Emacs' shell buffers): a terminal that cannot erase a line gets none."""
    monkeypatch.setenv("TERM", "dumb")
    terminal = Terminal()
    with StatusLine(lambda: "stage 1: 0/1 tasks done, 1 running", terminal, first=60) as line:
        line.draw()
    assert terminal.getvalue() == ""


def test_a_line_of_the_command_prints_in_place_of_the_progress_line():
    terminal, clock = Terminal(), Clock()
    with StatusLine(lambda: "stage 4: 1/2 tasks done, 1 running", terminal, first=60, clock=clock,
                    width=200) as line:
        line.draw()
        with line.above():
            terminal.write("-- batch 3 in 1.20 s: read 1 file, 2 rows; wrote 1 file, 2 rows\n")
        line.draw()
        assert terminal.lines() == ["-- batch 3 in 1.20 s: read 1 file, 2 rows; wrote 1 file, 2 rows",
                                    "-- running for 0 s: stage 4: 1/2 tasks done, 1 running"]
    assert terminal.lines()[-1] == ""


def test_a_stream_waiting_for_its_next_batch_shows_no_line():
    """``idle=False`` (``sqlext stream --every``): the line shows while a stage runs only."""
    terminal, clock = Terminal(), Clock()
    tracker = Tracker(Stage(2, 2, 2, 0))
    with StatusLine(lambda: stages_text(tracker), terminal, first=60, idle=False, clock=clock, width=200) as line:
        line.draw()
        assert terminal.lines() == ["-- running for 0 s: stage 2: 0/2 tasks done, 2 running"]
        tracker.stages = {}
        line.draw()
        assert terminal.lines() == [""]


def test_repeating_calls_until_the_block_ends_and_not_at_all_for_zero():
    """What ``sqlext build``'s "still running" lines are made with."""
    calls = []
    with Repeating(0.01, lambda: calls.append(1)):
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    seen = len(calls)
    time.sleep(0.05)
    assert seen >= 3 and len(calls) == seen
    with Repeating(0, lambda: calls.append(1)):
        time.sleep(0.03)
    assert len(calls) == seen


def test_sqlext_run_shows_spark_s_stage_while_a_statement_runs_then_its_result(spark, monkeypatch, capsys):
    """Spark's own status tracker, read while a task runs (it sleeps 1.5 s), and the line
    cleared before ``sqlext run`` prints the result."""
    import sys

    from sqlext.cli.run import _run_one
    from sqlext.statements import split_statements

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    statement = split_statements("SELECT reflect('java.lang.Thread', 'sleep', id + 1500) AS slept FROM range(0, 1, 1, 1)")[0]
    assert _run_one(spark, Path("slow.sql"), statement, 10)
    shown = [line for line in terminal.lines() if line]
    assert shown == [], terminal.getvalue()  # cleared
    drawn = re.split(r"\r|\n|\x1b\[K", terminal.getvalue())
    stage = re.compile(r"^-- running for \d+ s: stage \d+: 0/1 tasks done, [01] running$")
    assert any(stage.match(line) for line in drawn), "\n".join(drawn)
    out = capsys.readouterr().out
    assert out.startswith("-- slow.sql:1: SELECT reflect") and "| slept |" in out and "| null  |" in out


def test_spark_status_of_an_idle_session_is_none(spark):
    assert spark_status(spark)() is None


def test_the_line_goes_with_what_the_terminal_echoed_after_it():
    """Ctrl-C while the line shows: the terminal echoes ``^C`` after it; the clearing takes both
    (``Query cancelled.`` and the stop line print on a line of their own)."""
    terminal = Terminal()
    with StatusLine(lambda: None, terminal, first=60, clock=Clock(), width=200) as line:
        line.draw()
        terminal.write("^C")
    terminal.write("Query cancelled.\n")
    assert terminal.lines() == ["Query cancelled.", ""]
