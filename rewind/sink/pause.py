"""The crash tests' hook that stops a writer between its pre-commit and its commit."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["pause_before_commit"]


def pause_before_commit(batch_id: int) -> Callable[[], None] | None:
    """Test hook ``REWIND_PAUSE_BEFORE_COMMIT=<batch>:<file>``: after the pre-commit of that batch, touch
    the file and wait to be killed (the crash tests kill the driver between pre-commit and commit:
    a Kafka sink's flushed transaction, a Delta sink's merged tables before the ledger row)."""
    value = os.environ.get("REWIND_PAUSE_BEFORE_COMMIT", "")
    want, _, marker = value.partition(":")
    if not value or int(want) != batch_id:
        return None

    def pause() -> None:
        Path(marker).write_text(json.dumps({"batch": batch_id, "pid": os.getpid()}))
        log.warning("REWIND_PAUSE_BEFORE_COMMIT: batch %d pre-committed, waiting to be killed", batch_id)
        while True:
            time.sleep(1)

    return pause
