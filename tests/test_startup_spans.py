"""The driver's start-up split (rewind.driver.startup): pure, over given times."""

from __future__ import annotations

from rewind.driver.startup import StartupSpans, process_start


def test_spans_run_from_the_jvm_through_each_step_to_the_first_batch() -> None:
    s = StartupSpans(python_start=100.0, jvm_start=98.5)
    for step, at in (("python", 102.0), ("checks", 102.25), ("lease", 102.5), ("session", 105.0),
                     ("query", 107.5), ("first_batch", 111.0)):
        s.mark(step, at)
    assert s.spans() == {"jvm": 1.5, "python": 2.0, "checks": 0.25, "lease": 0.25, "session": 2.5, "query": 2.5,
                         "first_batch": 3.5}
    assert s.total() == 12.5 == sum(s.spans().values())
    assert s.line("demo") == ("stream demo: first batch in 12.50s since its spark-submit JVM started (jvm 1.50, "
                              "python 2.00, checks 0.25, lease 0.25, session 2.50, query 2.50, first_batch 3.50)")


def test_without_spark_submit_the_split_starts_at_the_process() -> None:
    s = StartupSpans(python_start=10.0)
    s.mark("python", 11.0)
    s.mark("first_batch", 14.0)
    assert s.spans() == {"python": 1.0, "first_batch": 3.0} and s.total() == 4.0
    assert "since its process started" in s.line("x")
    started, jvm = process_start()  # this test's own process: not under spark-submit
    assert jvm is None and 0 < started
