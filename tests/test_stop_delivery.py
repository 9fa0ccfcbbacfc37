"""A stopping driver waits for its listener to write the last batch's progress (``await_last_progress``).

Spark delivers progress events on its own bus thread, after the query has moved on; without the wait
a driver stopped right after a batch wrote "stopped" with the batch before it, while the consumer
group (committed from the same event) was already one batch ahead. Pure logic: a stand-in query.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from rewind.stream.status import await_last_progress


class Query:
    def __init__(self, batch: int | None) -> None:
        self.lastProgress = None if batch is None else SimpleNamespace(batchId=batch)


def test_it_returns_once_the_listener_has_written_the_last_batch() -> None:
    listener = SimpleNamespace(delivered_batch=6)
    late = threading.Timer(0.3, lambda: setattr(listener, "delivered_batch", 7))
    late.start()
    t = time.monotonic()
    assert await_last_progress(Query(7), listener, timeout=10)
    assert 0.25 < time.monotonic() - t < 5 and listener.delivered_batch == 7


def test_nothing_to_wait_for() -> None:
    assert await_last_progress(Query(None), SimpleNamespace(delivered_batch=None), timeout=0.1)
    assert await_last_progress(Query(3), SimpleNamespace(delivered_batch=4), timeout=0.1)


def test_bounded_when_the_event_never_comes() -> None:
    t = time.monotonic()
    assert not await_last_progress(Query(9), SimpleNamespace(delivered_batch=None), timeout=0.3)
    assert time.monotonic() - t < 2


def test_a_query_whose_jvm_is_gone() -> None:
    class Gone:
        @property
        def lastProgress(self) -> None:
            raise ConnectionError("py4j: Connection reset")

    assert not await_last_progress(Gone(), SimpleNamespace(delivered_batch=None), timeout=5)
