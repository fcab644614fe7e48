"""What a command says while long work goes on.

:class:`Repeating` calls a function every few seconds on a thread of its own while a block
runs: ``sqlext build`` says a long model is "still running" with it, a line each time, for a
terminal and a log alike. :class:`StatusLine` is the terminal's progress line of ``sqlext
run``, ``sqlext sql`` and ``sqlext stream``: on standard error, rewritten in place (``\\r``)
while the block runs, saying how long it has run and what Spark is doing (:func:`spark_status`:
its active stages and their tasks, from Spark's status tracker), and cleared when the block
ends, so that the results print where it was. Where standard error is not a terminal (a pipe,
a file, a CI log), or is a dumb one (``TERM=dumb``), it says nothing: a log gets no carriage
returns.

A session attached to ``sqlext serve`` is a Spark Connect client, which has no status tracker:
its line says how long the statement has run, and nothing of the stages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable

# the progress line appears once a statement has run this long (a quick one prints nothing),
# and is rewritten this often
FIRST_AFTER = 1.0
EVERY = 0.5
# the terminal's "erase to the end of the line" (what follows the cursor: a longer line drawn
# before, the "^C" the terminal echoed after it)
ERASE_LINE = "\x1b[K"


class Repeating:
    """``tick()`` every ``every`` seconds (the first time after ``first`` seconds, by default
    ``every``) on a daemon thread, while the ``with`` block runs; nothing where ``every`` is 0.
    The thread has stopped calling it when the block has ended."""

    def __init__(self, every: float, tick: Callable[[], None], first: float | None = None):
        self._every, self._tick = every, tick
        self._first = every if first is None else first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlext-progress", daemon=True)

    def _run(self) -> None:
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C is the main thread's to take
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        wait = self._first
        while not self._stop.wait(wait):
            self._tick()
            wait = self._every

    def __enter__(self):
        if self._every > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)  # a tick waits for Spark at most this long before it is left behind


def spark_status(spark) -> Callable[[], str | None]:
    """What Spark is doing now, in words, for :class:`StatusLine`: its active stages with their
    tasks done, running and in all (``stage 7: 5/8 tasks done, 2 running``), None while none
    runs. For a Spark Connect session (no status tracker), always None."""
    from sqlext.runner import is_connect

    if is_connect(spark):
        return lambda: None
    trackers = []

    def status() -> str | None:
        if not trackers:  # asked of the JVM the first time the line is drawn
            trackers.append(spark.sparkContext.statusTracker())
        return stages_text(trackers[0])

    return status


def stages_text(tracker) -> str | None:
    """The active stages of a status tracker (PySpark's ``StatusTracker``, or anything with its
    ``getActiveStageIds`` and ``getStageInfo``), in words; None when none runs.

    >>> from collections import namedtuple
    >>> Info = namedtuple("Info", "stageId numTasks numActiveTasks numCompletedTasks")
    >>> class Tracker:
    ...     def __init__(self, *infos): self.infos = {i.stageId: i for i in infos}
    ...     def getActiveStageIds(self): return list(self.infos)
    ...     def getStageInfo(self, stage): return self.infos.get(stage)
    >>> stages_text(Tracker(Info(7, 8, 2, 5)))
    'stage 7: 5/8 tasks done, 2 running'
    >>> stages_text(Tracker(Info(9, 4, 1, 3), Info(8, 200, 0, 0)))
    'stages 8, 9: 3/204 tasks done, 1 running'
    >>> stages_text(Tracker()) is None
    True
    """
    infos = [info for info in (tracker.getStageInfo(stage) for stage in sorted(tracker.getActiveStageIds()))
             if info is not None]
    if not infos:
        return None
    names = ", ".join(str(info.stageId) for info in infos)
    done, total = sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)
    running = sum(i.numActiveTasks for i in infos)
    return f"stage{'s' if len(infos) > 1 else ''} {names}: {done}/{total} tasks done, {running} running"


class StatusLine:
    """A progress line on a terminal while the ``with`` block runs: ``-- running for 12 s:
    stage 7: 5/8 tasks done, 2 running`` (``status()`` says what comes after the time; where it
    says None, the time alone, or nothing where ``idle`` is False), on ``stream`` (standard
    error), first after ``first`` seconds, rewritten every ``every`` seconds (``\r``, the
    line, then :data:`ERASE_LINE`), cut to the terminal's width (a line that wrapped could not
    be rewritten), and cleared when the block ends. Nothing at all where ``stream`` is not a
    terminal (:func:`is_terminal`). :meth:`above` prints a line of the command's own while it
    shows."""

    def __init__(self, status: Callable[[], str | None] = lambda: None, stream=None, first: float = FIRST_AFTER,
                 every: float = EVERY, idle: bool = True, clock: Callable[[], float] = time.monotonic,
                 width: int | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.status, self.idle, self.clock = status, idle, clock
        self.shown = is_terminal(self.stream)
        self._width = width
        self._lock = threading.Lock()
        self._drawn = 0  # the length of the line on the terminal now (0: none shown)
        self._ended = False
        self._started = clock()
        self._repeating = Repeating(every if self.shown else 0, self.draw, first)

    def __enter__(self):
        self._started = self.clock()
        self._repeating.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._ended = True
            self._clear()
        self._repeating.__exit__(*exc)

    def line(self) -> str | None:
        """The line as it reads now; None where there is nothing to show."""
        try:
            doing = self.status()
        except Exception:  # noqa: BLE001 - Spark busy starting or stopping: say the time alone
            doing = None
        if doing is None and not self.idle:
            return None
        seconds = self.clock() - self._started
        return f"-- running for {seconds:.0f} s" + (f": {doing}" if doing else "")

    def draw(self) -> None:
        """Show the line as it reads now, in place of the one shown before."""
        if not self.shown:
            return
        text = self.line()
        with self._lock:
            if self._ended:
                return
            if text is None:
                self._clear()
                return
            text = text[:max(10, self.width() - 1)]
            self._write("\r" + text + ERASE_LINE)
            self._drawn = len(text)

    @contextlib.contextmanager
    def above(self):
        """Within this block the command prints lines of its own (a run's batch line): the
        progress line is cleared first, and drawn again at its next turn."""
        with self._lock:
            self._clear()
            yield

    def width(self) -> int:
        if self._width is not None:
            return self._width
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80

    def _clear(self) -> None:
        if self._drawn:
            self._write("\r" + ERASE_LINE)
            self._drawn = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away
            self.shown = False


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal that can rewrite a line: not a pipe or a file, and not
    a terminal that says it is a dumb one (``TERM=dumb``: Emacs' shell buffers, some CI
    consoles), which cannot erase what it showed."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False
