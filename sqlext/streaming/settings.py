"""sqlext's own Spark settings of a run that take a whole number (``spark.sqlext.streaming.*``),
read and checked in one way: a value that is not one is ``[INVALID_SETTING]``."""

from __future__ import annotations

from sqlext.errors import SqlextError


def whole_number(spark, setting: str, expected: str, example, default: str, underscores: bool = False) -> int | None:
    """The whole number of 1 or more that ``setting`` holds; None where it is unset.
    ``underscores``: digits may be grouped with ``_`` (``5_000_000``). ``expected``, ``example``
    and ``default`` are what the error says a value should be, an example, and what an unset
    setting means."""
    value = spark.conf.get(setting, "").strip()
    if underscores:
        value = value.replace("_", "")
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise SqlextError("INVALID_SETTING", function="sqlext stream", setting=setting, value=repr(value),
                          expected=expected, example=example, default=default)
    return int(value)
