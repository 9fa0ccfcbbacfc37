"""An interrupted batch's error is made short in the form Spark's own check reads (``rewind.driver.interruption``).

Spark 4.2 matches a failed ``foreachBatch``'s proxy message against ``StreamExecution.PROXY_ERROR`` to tell a stop
from a failure; on a Java stack trace that pattern overflows the stream thread's stack. Pure logic: the same
pattern in Python's ``re``, the exception a stopped batch raised (its text from a driver's log of 2026-11-29)."""

from __future__ import annotations

import re
import traceback
from typing import Any

import pytest

from rewind.driver.interruption import BatchInterrupted, interruption, stop_aware

# spark-sql 4.2.0, StreamExecution$.PROXY_ERROR: the literal, then IO_EXCEPTION_NAMES joined by "|"
PROXY_ERROR = re.compile(r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)("
                         r"java.lang.InterruptedException|java.io.InterruptedIOException|"
                         r"java.nio.channels.ClosedByInterruptException)")

STACK = "".join(f"\tat org.apache.spark.Frame{i}.call(Frame.scala:{i})\n" for i in range(200))


class Py4JJavaError(Exception):  # the name is what ``interruption`` reads: py4j's own needs a gateway
    pass


def raised(text: str) -> Py4JJavaError:
    return Py4JJavaError(text)


def proxy_message(exc: BaseException) -> str:
    """What py4j's client server returns to the JVM for a Python proxy's error: the formatted traceback."""
    return "".join(traceback.format_exception(exc))


def test_an_interrupted_batch_fails_short_and_matches_sparks_pattern() -> None:
    def writer(df: object, batch_id: int) -> None:
        raise raised("An error occurred while calling o2154.getResult.\n: java.lang.InterruptedException\n" + STACK)

    with pytest.raises(BatchInterrupted) as info:
        stop_aware(writer)(None, 58)
    message = proxy_message(info.value)
    assert len(message) < 1_000, message
    assert "Frame199" not in message and "During handling" not in message
    assert PROXY_ERROR.search(message)


def test_any_other_error_is_raised_unchanged() -> None:
    boom = raised("An error occurred while calling o12.toArrow.\n: org.apache.spark.SparkException: bad record\n"
                  + STACK)

    def writer(df: object, batch_id: int) -> None:
        raise boom

    with pytest.raises(Py4JJavaError) as info:
        stop_aware(writer)(None, 3)
    assert info.value is boom
    assert interruption(ValueError("java.lang.InterruptedException")) is None  # not a Java error: kept as is
    assert not PROXY_ERROR.search(proxy_message(boom))  # Spark reads it as the failure it is


@pytest.mark.parametrize("name", ["java.io.InterruptedIOException", "java.nio.channels.ClosedByInterruptException"])
def test_every_name_spark_reads_as_an_interruption(name: str) -> None:
    head = interruption(raised(f"An error occurred while calling o7.collect.\n: {name}: interrupted\n" + STACK))
    assert head is not None and name in head and PROXY_ERROR.search(head) and "\tat " not in head


def test_sparks_own_pattern_in_its_jvm_reads_the_short_error_and_overflows_on_the_long_one(spark: Any) -> None:
    """Spark's ``StreamExecution.PROXY_ERROR`` itself, in the session's JVM (a py4j thread, the JVM's default stack):
    the long message of a stopped batch (a realistic Java stack of 60 frames, about 5 KB) overflows it, the short one
    matches as an interruption."""
    stream_execution = spark._jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution
    interrupted = raised("An error occurred while calling o2154.getResult.\n: java.lang.InterruptedException\n"
                         + "".join(f"\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:"
                                   f"{i})\n" for i in range(60)))
    type(interrupted).__module__ = "py4j.protocol"  # its traceback line then reads as py4j's own does
    try:
        long = "An exception was raised by the Python Proxy. Return Message: " + proxy_message(interrupted)

        def writer(df: object, batch_id: int) -> None:
            raise interrupted

        with pytest.raises(BatchInterrupted) as info:
            stop_aware(writer)(None, 58)
        short = "An exception was raised by the Python Proxy. Return Message: " + proxy_message(info.value)
    finally:
        type(interrupted).__module__ = __name__
    assert stream_execution.PROXY_ERROR().findFirstIn(short).isDefined()
    with pytest.raises(Exception, match="StackOverflowError"):
        stream_execution.PROXY_ERROR().findFirstIn(long).isDefined()
    assert spark.range(3).count() == 3  # the session's gateway is whole after the overflow in one of its threads
