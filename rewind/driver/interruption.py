"""A batch that the query's stop interrupts leaves ``foreachBatch`` with a short error that Spark recognizes.

Why: a graceful stop lets the batch in flight commit, but a backlog can start the next batch before
``query.stop()`` lands. Spark then interrupts the stream thread, and the batch's Spark job call raises a
``Py4JJavaError`` whose text carries the whole Java stack trace. Spark decides whether a failure is the stop's
own interruption by matching the Python proxy's message against ``StreamExecution.PROXY_ERROR``
(spark-sql 4.2.0: ``py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(
java.lang.InterruptedException|...)``). That alternation recurses once per character, and on a message of a few
kilobytes it overflows the stream thread's stack. The thread then dies with a ``StackOverflowError`` printed in
the driver's log, on a stop that was clean (seen in 4 of 6 blue/green runs, 2026-11-29). Re-raised as the Java
exception's first two lines, the message matches at once and the stop ends as a stop. Any other error is
re-raised unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Spark's ``StreamExecution.IO_EXCEPTION_NAMES``: what an interrupted stream thread raises.
INTERRUPTS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
              "java.nio.channels.ClosedByInterruptException")


class BatchInterrupted(Exception):
    """The batch's Spark job was interrupted by the query's stop (the message is the Java exception's head)."""


def interruption(exc: BaseException) -> str | None:
    """``exc``'s first two lines in the form Spark's check reads, if a Java interruption ended it; else None."""
    if type(exc).__name__ != "Py4JJavaError":
        return None
    head = "\n".join(str(exc).splitlines()[:2])
    if not any(name in head for name in INTERRUPTS):
        return None
    return f"py4j.protocol.Py4JJavaError: {head}"


def stop_aware(writer: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """``writer`` for ``foreachBatch``, with an interrupted batch's error made short (see the module's why)."""

    def write(df: Any, batch_id: int) -> None:
        try:
            writer(df, batch_id)
        except Exception as exc:
            head = interruption(exc)
            if head is None:
                raise
            raise BatchInterrupted(head) from None

    return write
