"""One rule for every Rewind task: a refusal fails the task without retries; a failure may retry.

Why: Airflow retries a failed task, which is right when a broker blinked and wrong when the input
was bad or the situation unsafe (a replay range beyond retention, a second driver on a checkpoint,
a crash loop): retrying a refusal only repeats it, later and louder. ``rewind.errors`` says which
is which (``RewindError.retry``); this turns the no-retry ones into ``AirflowFailException``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rewind.errors import RewindError


@contextmanager
def fail_without_retry_on_refusal() -> Iterator[None]:
    try:
        yield
    except RewindError as exc:
        if exc.retry:
            raise
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(str(exc)) from exc
