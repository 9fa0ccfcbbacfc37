"""The acting steps of an upgrade: stop with a savepoint, put the checkpoint where the mode says,
watch the new version, roll back. Each leaves the stream in a state a relaunch can run from.

Order, and why: the savepoint is taken at the stop (every mode: the rollback restores it); the
checkpoint is switched (savepoint: a verified restore into a fresh directory; last-state: none;
stateless: a fresh directory that starts at the savepoint's offsets), then the registry entry, then
the launch. Were the upgrade to die between two steps, what is left is either the old entry on a
checkpoint holding the same state, or the new entry on it: both run, and the history record says
which steps were done.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint, point_to
from rewind.checkpoints.savepoints import restore_savepoint, savepoint_with_stop
from rewind.control.status_store import read_stream_status
from rewind.storage.location import open_storage
from rewind.supervision.failures import record_failure, reset
from rewind.supervision.observe import running_reason
from rewind.supervision.process_control import (
    StreamControlError,
    StreamFailed,
    stop_driver,
    stop_stream,
    stream_liveness,
)
from rewind.supervision.reconcile import wait_for_progress
from rewind.upgrade.watch import Attempt, next_step

log = logging.getLogger(__name__)

#: A launch reports running, then its first batch must commit; how long a rollback's old version gets.
ROLLBACK_PROGRESS_S = 300.0


def stop_with_savepoint(spec: Any, store: Any, start: Callable[[Any], int], stop_timeout: float) -> Any:
    """Stop the stream after its batch in flight and take a savepoint (``savepoint_with_stop``); the
    manifest. If the copy fails after the stop, the old version is launched again before raising."""

    was_running = stream_liveness(spec).running
    try:
        return savepoint_with_stop(spec, store, stop=stop_stream, restart=None, stop_timeout=stop_timeout)
    except BaseException as exc:
        if was_running and not stream_liveness(spec).running:
            try:
                start(spec)
            except Exception as again:  # noqa: BLE001 - the first error is the one to raise
                exc.add_note(f"and launching {spec.name} again failed ({again}): start it with `rewind stream run "
                             f"{spec.name}`")
        raise


def stateless_checkpoint(spec: Any, record_id: str, offsets: dict[str, dict[str, int]]) -> str:
    """A new checkpoint beside the stream's (on local disk or in S3) whose query starts at ``offsets``: only
    ``sources/0/0``, the initial offsets Spark's Kafka connector writes when a query starts and reads instead
    of ``startingOffsets`` ever after (its format: a zero byte, ``v1``, the offsets JSON). No offset log, no
    state: a new query."""

    base = str(spec.checkpoint).rstrip("/")
    fresh = f"{base}.stateless-{record_id}" if "://" in base else str(Path(f"{base}.stateless-{record_id}").resolve())
    store = open_storage(fresh)
    if store.exists("sources"):
        raise FileExistsError(f"{fresh} exists already: a stateless checkpoint is always new")
    store.write_bytes("sources/0/0", b"\x00v1\n" + json.dumps(offsets, sort_keys=True).encode())
    return fresh


def switch_checkpoint(spec: Any, store: Any, mode: str, manifest: Any, record_id: str) -> str:
    """Where the new version runs, by mode (the pointer moves; the old checkpoint stays); its path."""

    if mode == "savepoint":
        return str(restore_savepoint(spec, store, manifest.savepoint_id, running=running_reason(spec)).path)
    if mode == "stateless":
        fresh = stateless_checkpoint(spec, record_id, manifest.offsets)
        point_to(spec, fresh, f"stateless upgrade {record_id}: a new checkpoint from the offsets of savepoint "
                              f"{manifest.savepoint_id} (batch {manifest.batch_id}), state dropped")
        return str(fresh)
    return active_checkpoint(spec)


def first_own_batch_after(spec: Any, mode: str, manifest: Any) -> int | None:
    """The batch the new version must commit past to count as running: its first batch it planned
    itself. In last-state mode the checkpoint may hold a batch the old version planned before the
    stop; the new version re-runs that plan first, which proves little (a record after it may be the
    one it cannot handle). A restored savepoint holds no plan past its batch; a stateless checkpoint
    starts at batch 0."""
    if mode == "stateless":
        return None
    if mode == "savepoint":
        return int(manifest.batch_id)

    planned = inspect_checkpoint(active_checkpoint(spec), recent=2).planned
    return max([int(manifest.batch_id), *([int(planned[-1])] if len(planned) else [])])


def watch(spec: Any, start: Callable[[Any], int], after_batch: int | None, grace_s: float,
          on_attempt: Callable[[Attempt], None] = lambda _a: None, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.time) -> tuple[str, str, list[Attempt]]:
    """Launch the new version and watch it (``rewind.upgrade.watch.next_step``); (``healthy`` or
    ``rollback``, why, the attempts). Failures are recorded in the supervisor's history too, so the
    page and ``rewind supervisor status`` show them."""

    attempts: list[Attempt] = []
    first = clock()
    while True:
        left = max(1.0, grace_s - (clock() - first))
        try:
            pid = start(spec)
            wait_for_progress(spec, pid, after_batch, left)
            attempt = Attempt(clock(), True)
        except (StreamFailed, StreamControlError, TimeoutError) as exc:
            cause = getattr(exc, "cause", "no_progress" if isinstance(exc, TimeoutError) else "launch_failed")
            attempt = Attempt(clock(), False, cause, str(exc)[:4000], after_batch)
            status = read_stream_status(spec)  # the offsets the next batch starts at, for the verdict
            record_failure(spec, cause, f"upgrade: {exc}", after_batch, status.end_offsets if status else {},
                           attempt.at)
            stop_driver(spec, timeout=30)
        attempts.append(attempt)
        on_attempt(attempt)
        decision = next_step(attempts, spec.restart, first, clock(), grace_s)
        if decision.action != "relaunch":
            if decision.action == "rollback":
                stop_driver(spec, timeout=60)
            return decision.action, decision.reason, attempts
        log.warning("%s: the new version failed (%s); relaunching in %.0fs", spec.name, attempt.cause,
                    decision.delay_s)
        sleep(decision.delay_s)


def rollback(old: Any, store: Any, manifest: Any, put_back: Callable[[], None], start: Callable[[Any], int],
             timeout_s: float = ROLLBACK_PROGRESS_S) -> dict[str, Any]:
    """Back to the pre-upgrade savepoint and entry: the new version stopped, the savepoint restored into
    a fresh checkpoint, the old entry written back (``put_back``), the crash verdict of the new
    version cleared (kept in the record), the old version launched until it commits a batch."""

    stop_driver(old, timeout=60)
    restored = restore_savepoint(old, store, manifest.savepoint_id, running=running_reason(old))
    put_back()
    cleared = reset(old)
    pid = start(old)
    first = wait_for_progress(old, pid, manifest.batch_id, timeout_s)
    return {"savepoint_id": manifest.savepoint_id, "checkpoint": str(restored.path), "first_batch": first,
            "cleared_failures": len(cleared.get("failures", [])), "gave_up": cleared.get("gave_up")}
