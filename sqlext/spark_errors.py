"""sqlext's errors where Spark raises them: whichever action runs a query (``collect()``,
``count()``, ``show()``, ``toPandas()``, ``toArrow()``, ``take()``, a write), an error that
carries one of sqlext's is raised as :class:`sqlext.errors.SqlextError`, from Spark's.

A check sqlext's rewrite puts in the SQL fails in Spark's tasks (Spark raises it as
``USER_RAISED_EXCEPTION``), a table function's error in a Python worker (``PythonException``):
PySpark converts either into its own exception class where the result comes back. Those
places are hooked here, once per process, when sqlext is installed on a session of it:

- a classic session: the function py4j returns every JVM call's result through, which PySpark
  wraps to convert the JVM's errors (and wraps again for each session it makes: its wrapper
  is hooked too, so that the next one is), and the conversion of the errors of an Arrow
  collection (``toPandas()``, ``toArrow()``), which PySpark makes apart from it;
- a Spark Connect session: the client's one handler of the server's errors.

Each hook lets the call run as it would and looks only at the error it raises:
:func:`sqlext.errors.carried_by` says whether that error carries one of sqlext's, deciding
only by what was raised (never by the plan text Spark prints). Every other error passes
unchanged, the same exception object: Spark's analysis errors stay Spark's. The hook is per
process because PySpark's conversion is, so it applies to every session of the process, those
sqlext is not installed on too; there, too, only an error that carries sqlext's changes.
"""

from __future__ import annotations

import contextlib
import functools
import threading

from sqlext.errors import carried_by

# set on what a hook has wrapped, so that installing twice wraps nothing twice
_HOOKED = "__sqlext_error_hook__"
_busy = threading.local()


def install_error_hooks(spark) -> None:
    """Hook the places where errors of ``spark``'s kind (classic or Spark Connect) are
    converted; idempotent, and cheap once done."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        _hook_connect()
    else:
        _hook_classic()


def _hook_classic() -> None:
    import py4j.java_gateway
    from pyspark.errors.exceptions import captured

    if not getattr(py4j.java_gateway.get_return_value, _HOOKED, False):
        py4j.java_gateway.get_return_value = reraising(py4j.java_gateway.get_return_value)
    if not getattr(captured.capture_sql_exception, _HOOKED, False):
        # PySpark wraps py4j's function anew for each session it makes (install_exception_handler)
        spark_capture = captured.capture_sql_exception

        @functools.wraps(spark_capture)
        def capture(function):
            return reraising(spark_capture(function))

        setattr(capture, _HOOKED, True)
        captured.capture_sql_exception = capture
    modules = [captured]
    try:
        from pyspark.sql.pandas import conversion

        modules.append(conversion)  # it imported PySpark's context manager by name
    except ImportError:  # no Arrow collection without it
        pass
    for module in modules:
        if not getattr(module.unwrap_spark_exception, _HOOKED, False):
            module.unwrap_spark_exception = _reraising_context(module.unwrap_spark_exception)


def _hook_connect() -> None:
    from pyspark.sql.connect.client.core import SparkConnectClient

    if not getattr(SparkConnectClient._handle_error, _HOOKED, False):
        SparkConnectClient._handle_error = reraising(SparkConnectClient._handle_error)


def reraising(function):
    """``function``, raising a Spark error it raises that carries a sqlext error as that
    error (:func:`sqlext.errors.carried_by`), from Spark's; other errors pass unchanged."""
    if getattr(function, _HOOKED, False):
        return function

    @functools.wraps(function)
    def call(*args, **kwargs):
        from pyspark.errors import PySparkException

        try:
            return function(*args, **kwargs)
        except PySparkException as error:
            ours = _carried(error)
            if ours is None:
                raise
            raise ours from error

    setattr(call, _HOOKED, True)
    return call


def _reraising_context(manager):
    """The context manager ``manager`` (PySpark's conversion of an Arrow collection's error),
    raising as :func:`reraising` does."""

    @contextlib.contextmanager
    def converting(*args, **kwargs):
        from pyspark.errors import PySparkException

        try:
            with manager(*args, **kwargs):
                yield
        except PySparkException as error:
            ours = _carried(error)
            if ours is None:
                raise
            raise ours from error

    converting = functools.wraps(manager)(converting)
    setattr(converting, _HOOKED, True)
    return converting


def _carried(error: BaseException):
    """:func:`sqlext.errors.carried_by`, not reentered: reading a classic error asks the JVM,
    through the hooked function, and an error there is left as it is."""
    if getattr(_busy, "active", False):
        return None
    _busy.active = True
    try:
        return carried_by(error)
    except Exception:  # noqa: BLE001 - a hook never replaces Spark's error with one of its own
        return None
    finally:
        _busy.active = False
