"""What an operator reads first is the cause (pure: ``rewind.supervision.causes``, the crash-loop verdict).

The text is what a ``foreachBatch`` error reaches the supervisor as: Spark's StreamingQueryException
around py4j's proxy traceback, whose frames carry the checkout's path. At a 200-character path the
verdict of before (the detail cut at 1,500 characters from its start) lost the exception's own line."""

from __future__ import annotations

import pytest

from rewind.registry import RestartSpec
from rewind.supervision.causes import CAUSE_LIMIT, headline
from rewind.supervision.restart_policy import Failure, decide

LONG = "/srv/" + "checkouts-of-the-platform-team/" * 6 + "rewind"  # ~200 characters
CAUSE = "rewind.faults.FaultInjected: fault point batch.write (batch 2) raised"


def spark_error(root: str, frames: int = 12, cause: str = CAUSE) -> str:
    tb = "".join(f'  File "{root}/.venv/lib/python3.11/site-packages/pyspark/sql/frame_{i}.py", line {100 + i}, '
                 f"in call\n    return self.func(*args)\n" for i in range(frames))
    return ("[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch "
            "sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
            f"call last):\n{tb}{cause}\n SQLSTATE: 39000\n=== Streaming Query ===\nIdentifier: [id = 1f]\n"
            "Current Committed Offsets: {KafkaV2[Subscribe[t]]: {\"t\":{\"0\":750}}}")


@pytest.mark.parametrize("root", ["/w", LONG])
def test_the_python_exception_line_is_found_under_py4js_wrapping(root: str) -> None:
    assert headline(spark_error(root)) == CAUSE
    detail = f"{CAUSE.split(': ', 1)[0]} ...\nthe query terminated at last batch 1"  # a first line, no traceback
    assert headline(detail).startswith("rewind.faults.FaultInjected")


def test_a_chained_python_exception_names_the_last_one() -> None:
    text = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\nKeyError: 'k'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File \"b.py\", line 2, in h\n    raise ValueError(x)\n"
            "ValueError: cannot price key 'poison'\n")
    assert headline(text) == "ValueError: cannot price key 'poison'"


def test_a_jvm_error_names_its_deepest_cause_and_a_plain_one_its_first_line() -> None:
    java = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed\n"
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)\n"
            "Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired\n"
            "\tat org.apache.kafka.clients.consumer.internals.Fetcher.x(Fetcher.java:1)\n"
            "Caused by: java.io.IOException: Broker may not be available\n\tat x.y(Z.java:1)\n")
    assert headline(java) == "java.io.IOException: Broker may not be available"
    assert headline("the driver exited with code 137\nmore") == "the driver exited with code 137"
    assert headline("") == "no message"
    long = "ValueError: " + "x" * 2000
    assert len(headline(long)) == CAUSE_LIMIT and headline(long).endswith("...")


@pytest.mark.parametrize("root", ["/w", LONG])
def test_the_crash_loop_verdict_leads_with_the_cause_then_the_batch_and_offsets(root: str) -> None:
    offsets = {"orders-" + "x" * 40: {str(p): 10_000 + p for p in range(200)}}  # many partitions
    detail = f"{CAUSE}\nthe query terminated at last batch 1; the whole error:\n{spark_error(root, 40)}"
    history = [Failure(100.0 + i, "query_failed", 1, offsets, detail[:4000]) for i in range(3)]
    decision = decide(RestartSpec(strategy="fixed-delay", max_attempts=2, delay="1 seconds"), history, 103.0)
    assert not decision.restart
    assert decision.reason.startswith(f"crash loop: {CAUSE} -- 3 failures in a row without committing past batch 1 "
                                      "(the next batch, batch 2, starts at offsets {'orders-"), decision.reason[:400]
    assert "Traceback" not in decision.reason and root not in decision.reason
    assert len(decision.reason) < 2 * CAUSE_LIMIT + 1000  # bounded: the offsets are cut after the cause, not it
    rate = decide(RestartSpec(strategy="failure-rate", max_attempts=2, failure_rate_interval="1 hour"),
                  [Failure(100.0 + i, "query_failed", i, {}, detail) for i in range(3)], 103.0)
    assert not rate.restart and rate.reason.startswith(CAUSE + ": 3 failures within 1 hour"), rate.reason


def test_a_verdict_without_recorded_offsets_says_so_instead_of_printing_empty_ones() -> None:
    history = [Failure(100.0 + i, "launch_failed", 85, {}, "upgrade: ValueError: boom") for i in range(2)]
    reason = decide(RestartSpec(strategy="fixed-delay", max_attempts=1, delay="1 seconds"), history, 102.0).reason
    assert "offsets {}" not in reason and "batch 86, starts where the last committed batch ended" in reason, reason
    assert reason.startswith("crash loop: upgrade: ValueError: boom -- "), reason
