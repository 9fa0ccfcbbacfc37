"""A stopping driver waits for its listener to write the last batch's progress (``await_last_progress``).

Spark delivers progress events on its own bus thread, after the query has moved on; without the wait
a driver stopped right after a batch wrote "stopped" with the batch before it, while the consumer
group (committed from the same event) was already one batch ahead. An idle trigger's progress
(the next batch id, no ``addBatch``) sits in ``recentProgress`` but never reaches listeners as
progress: waiting for it would only time out. Pure logic: a stand-in query.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from rewind.control.status import await_last_progress


def ran(batch: int) -> Any:
    return SimpleNamespace(batchId=batch, durationMs={"addBatch": 40, "triggerExecution": 90})


def idle(batch: int) -> Any:
    return SimpleNamespace(batchId=batch, durationMs={"latestOffset": 3, "triggerExecution": 3})


class Query:
    def __init__(self, *progress: Any) -> None:
        self.recentProgress = list(progress)


def test_it_returns_once_the_listener_has_written_the_last_batch() -> None:
    listener = SimpleNamespace(delivered_batch=6)
    late = threading.Timer(0.3, lambda: setattr(listener, "delivered_batch", 7))
    late.start()
    t = time.monotonic()
    assert await_last_progress(Query(ran(6), ran(7)), listener, timeout=10)
    assert 0.25 < time.monotonic() - t < 5 and listener.delivered_batch == 7


def test_an_idle_triggers_progress_is_not_waited_for() -> None:
    """The chaos run's stop: batch 9 delivered, then idle triggers reported batch 10, which never ran."""
    t = time.monotonic()
    assert await_last_progress(Query(ran(8), ran(9), idle(10), idle(10)), SimpleNamespace(delivered_batch=9),
                               timeout=5)
    assert time.monotonic() - t < 1


def test_nothing_to_wait_for() -> None:
    assert await_last_progress(Query(), SimpleNamespace(delivered_batch=None), timeout=0.1)
    assert await_last_progress(Query(idle(0)), SimpleNamespace(delivered_batch=None), timeout=0.1)
    assert await_last_progress(Query(ran(3)), SimpleNamespace(delivered_batch=4), timeout=0.1)


def test_bounded_when_the_event_never_comes() -> None:
    t = time.monotonic()
    assert not await_last_progress(Query(ran(9)), SimpleNamespace(delivered_batch=None), timeout=0.3)
    assert time.monotonic() - t < 2


def test_a_query_whose_jvm_is_gone() -> None:
    class Gone:
        @property
        def recentProgress(self) -> list[Any]:
            raise ConnectionError("py4j: Connection reset")

    assert not await_last_progress(Gone(), SimpleNamespace(delivered_batch=None), timeout=5)
