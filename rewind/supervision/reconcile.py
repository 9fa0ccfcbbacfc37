"""The reconciler of the supervision loop: the one place that acts on a stream.

``observe`` reads, ``health.evaluate`` decides, this module acts: raise an alert, stop a hung
driver, record the failure and ask the restart strategy, bring the checkpoint back (nothing,
repair in place, or restore the newest valid savepoint), relaunch, and wait for the first new
batch. ``act`` runs a whole verdict (the chaos harness); the Airflow supervisor DAG runs the
same steps as separate tasks so each shows in the UI. A launch is refused while a driver holds
the checkpoint (``rewind.supervision.process_control.ensure_no_driver``): two drivers on one checkpoint
corrupt it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.repair import RepairRefused, repair_checkpoint
from rewind.checkpoints.savepoint_errors import SavepointCorrupt
from rewind.checkpoints.savepoints import list_savepoints, restore_savepoint
from rewind.control.driver_lease import driver_alive
from rewind.control.status_store import read_stream_status
from rewind.lineage.entry import dead_run
from rewind.registry import StreamSpec
from rewind.storage.location import open_storage
from rewind.supervision.failures import CrashLoop, record_alert, record_failure
from rewind.supervision.health import Verdict, unrecorded_death
from rewind.supervision.observe import Observation, observe, running_reason
from rewind.supervision.process_control import StreamFailed, stop_driver
from rewind.supervision.restart_policy import Decision

log = logging.getLogger(__name__)


def recover_checkpoint(spec: StreamSpec, s3_store: Any = None) -> dict[str, Any]:
    """Make the active checkpoint resumable: nothing / repair in place / restore the newest savepoint."""

    location = active_checkpoint(spec)
    cp = open_storage(location)  # local, or in S3 (a stream on a cluster): inspected and repaired where it is
    if not cp.list_dir("offsets")[1]:
        return {"action": "none", "checkpoint": location, "reason": "no checkpoint yet: the stream starts fresh"}
    report = inspect_checkpoint(cp)
    if not report.errors:
        return {"action": "none", "checkpoint": location, "last_complete": report.last_complete,
                "reason": "checkpoint is complete" + ("" if not report.problems else
                                                      f" ({report.problems[0].detail})")}
    try:
        record = repair_checkpoint(location, running=running_reason(spec))
        return {"action": "repaired", "checkpoint": location, "last_complete": record["rolled_back_to_batch"],
                "quarantine": record.get("quarantine"), "moved": len(record["moved"]),
                "problems": record["problems"]}
    except RepairRefused as exc:
        if "no complete batch" not in str(exc) or s3_store is None:
            raise
        return restore_newest_savepoint(spec, s3_store, reason=str(exc))


def restore_newest_savepoint(spec: StreamSpec, store: Any, reason: str) -> dict[str, Any]:

    tried: list[str] = []
    running = running_reason(spec)
    for manifest in sorted(list_savepoints(store, spec.name).complete, key=lambda m: m.created_at, reverse=True):
        try:
            result = restore_savepoint(spec, store, manifest.savepoint_id, running=running)
        except SavepointCorrupt as exc:  # a damaged savepoint is skipped for the next newest
            tried.append(f"{manifest.savepoint_id}: {exc}")
            continue
        return {"action": "restored", "savepoint": manifest.savepoint_id, "batch": manifest.batch_id,
                "checkpoint": str(result.path), "reason": reason, "skipped_savepoints": tried}
    raise CrashLoop(f"{spec.name}: the checkpoint cannot be repaired ({reason}) and no valid savepoint exists"
                    + (f" (tried: {'; '.join(tried)})" if tried else "") + ". Nothing was changed.")


def wait_for_progress(spec: StreamSpec, pid: int, after_batch: int | None, timeout: float) -> dict[str, Any]:
    """Wait until the stream `pid` commits a batch newer than `after_batch` (or is caught up, lag 0)."""

    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = read_stream_status(spec)
        if st and st.pid == pid:
            if st.state == "failed":
                raise StreamFailed("query_failed", f"{spec.name} failed after relaunch (last batch "
                                                   f"{st.last_batch_id}, offsets {st.end_offsets}): {st.exception}")
            # last_batch_at is set by this driver's own progress events (a seeded status has none)
            ran = st.last_batch_at is not None and st.last_batch_at >= st.started_at
            advanced = ran and st.last_batch_id is not None and (after_batch is None or st.last_batch_id > after_batch)
            caught_up = st.last_batch_id is not None and bool(st.latest_offsets) and st.total_lag == 0
            if st.state == "running" and (advanced or caught_up):
                return {"batch": st.last_batch_id, "lag": st.total_lag, "at": st.last_batch_at}
        if not driver_alive(spec)[0]:  # its lease: a pid where one can be checked, else its expiry
            raise StreamFailed("process_gone", f"{spec.name} (pid {pid}) exited after relaunch (state "
                                                    f"{st.state if st else 'unknown'})")
        time.sleep(0.5)
    raise TimeoutError(f"{spec.name} (pid {pid}) committed no batch after {after_batch} within {timeout:.0f}s")


def relaunch_until_progress(spec: StreamSpec, start: Callable[[], dict[str, Any]], after_batch: int | None,
                            delay_s: float, timeout_s: float = 300.0,
                            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Relaunch (after `delay_s`) until a new batch commits, as the restart strategy allows.

    Each failure of a relaunched stream is recorded and the strategy asked again, so a poison
    batch ends in `CrashLoop` (batch, offsets, exception) after the configured attempts rather
    than in endless restarts; the checkpoint is untouched, so no offset is skipped.
    """
    attempt = 0
    while True:
        if delay_s > 0:
            log.info("%s: relaunching in %.0fs", spec.name, delay_s)
            sleep(delay_s)
        attempt += 1
        try:
            started = start()
            first = wait_for_progress(spec, started["pid"], after_batch, timeout_s)
            return {**started, "first_batch": first, "relaunches": attempt}
        except StreamFailed as exc:
            decision = fail(spec, exc.cause, str(exc))
            log.warning("%s: relaunch %d failed: %s; %s", spec.name, attempt, exc, decision.reason)
            if not decision.restart:
                raise CrashLoop(f"{spec.name}: {decision.reason}") from exc
            delay_s = decision.delay_s


def fail(spec: StreamSpec, cause: str, detail: str, now: float | None = None) -> Decision:
    """Record a failure at the batch the stream is stuck behind and ask the restart strategy. A driver that
    died without ending its run (its status never said stopped or failed: SIGKILLed, lost with its host)
    gets its OpenLineage run closed with FAIL here (``rewind.lineage``; nothing without a transport)."""
    status = read_stream_status(spec)
    if status is not None and status.state not in ("stopped", "failed"):
        dead_run(spec, status.holder.get("driver_id"), f"{cause}: {detail}")
    return record_failure(spec, cause, detail, status.last_batch_id if status else None,
                          status.end_offsets if status else {}, now)


def begin_restart(spec: StreamSpec, verdict: Verdict, now: float | None = None) -> Decision:
    """The first half of a restart: stop a hung driver, record the failure, ask the strategy."""
    if verdict.stop_first:
        stop_driver(spec, timeout=60)  # a hung driver is stopped before a new one starts
    return fail(spec, str(verdict.health.cause), verdict.health.detail, now)


def recover_unseen_death(spec: StreamSpec, store_of: Callable[[], Any] = lambda: None,
                         sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """Before a launch: a driver that died while no watch looked (``health.unrecorded_death``) is
    recorded as a failure, the restart strategy asked (``CrashLoop`` when it gives up), its delay
    waited, and the checkpoint brought back, as after a death the watch saw. None when there is none.
    ``store_of`` opens the savepoint storage, only when a restore may be needed."""

    obs = observe(spec)
    health = unrecorded_death(obs)
    if health is None:
        return None
    decision = fail(spec, str(health.cause), health.detail, obs.at)
    log.warning("%s: %s; %s", spec.name, health.detail, decision.reason)
    if not decision.restart:
        raise CrashLoop(f"{spec.name}: {decision.reason}")
    if decision.delay_s > 0:
        sleep(decision.delay_s)
    return {"cause": health.cause, "detail": health.detail, "decision": decision.reason,
            "checkpoint": recover_checkpoint(spec, store_of())}


def alert(spec: StreamSpec, verdict: Verdict, now: float | None = None) -> str:
    """Record an alert (never a failure, never a restart); returns the text to show."""
    record_alert(spec, str(verdict.health.cause), verdict.health.detail, now)
    log.warning("%s: ALERT %s", spec.name, verdict.reason)
    return f"ALERT {spec.name}: {verdict.reason}"


def act(spec: StreamSpec, obs: Observation, verdict: Verdict, start: Callable[[], dict[str, Any]], store: Any = None,
        timeout_s: float = 300.0) -> dict[str, Any]:
    """Carry out one verdict: nothing, an alert, or a whole restart (stop if hung -> failure ->
    strategy -> checkpoint -> relaunch until a new batch). Raises ``CrashLoop`` when the strategy
    gives up; the checkpoint is never touched past its last complete batch."""
    if verdict.action == "none":
        return {"action": "none", "reason": verdict.reason}
    if verdict.action == "alert":
        return {"action": "alert", "text": alert(spec, verdict, obs.at)}
    decision = begin_restart(spec, verdict, obs.at)
    if not decision.restart:
        raise CrashLoop(f"{spec.name}: {decision.reason}")
    checkpoint = recover_checkpoint(spec, store)
    after = obs.status.last_batch_id if obs.status else None  # progress: a batch newer than this
    started = relaunch_until_progress(spec, start, after, decision.delay_s, timeout_s)
    return {"action": "restart", "decision": decision.reason, "checkpoint": checkpoint, **started}
