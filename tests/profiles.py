"""How many examples each property test tries.

By default a few, chosen per test for what each costs (a test that runs Spark pays seconds per
example), and derandomised: every run tries the same examples, so a failure reproduces as it
is. ``SQLEXT_HYPOTHESIS_PROFILE=nightly`` loads the nightly profile (tests/conftest.py
registers both): each test tries its nightly count, at random, so that every night explores
examples the default run never reaches.
"""

from __future__ import annotations

import os

PROFILE = os.environ.get("SQLEXT_HYPOTHESIS_PROFILE", "default")


def examples(default: int, nightly: int) -> int:
    """A property test's number of examples under the profile this run loaded."""
    return nightly if PROFILE == "nightly" else default
