"""The supervisor's steps as plain functions: record a failure, bring the checkpoint back, wait for progress.

Airflow tasks call these (plugins/rewind_airflow wires them); they are equally usable from
a shell. The failure history lives beside the status file (``<stream>.failures.json``) so
the restart strategy sees every failure, across DAG runs, and a crash loop stays visible
until a person resets it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from rewind.registry import StreamSpec
from rewind.supervision.restart_policy import Decision, Failure, decide
from rewind.stream.status import read_status, status_path
from rewind.stream.control import StreamFailed

log = logging.getLogger(__name__)


class CrashLoop(RuntimeError):
    """The restart strategy gave up; the message has the batch, its offsets and the exception."""


def history_path(spec: StreamSpec) -> Path:
    return Path(spec.status_dir) / f"{spec.name}.failures.json"


def read_history(spec: StreamSpec) -> dict[str, Any]:
    try:
        return json.loads(history_path(spec).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"failures": [], "gave_up": None}


def _write_history(spec: StreamSpec, doc: dict[str, Any]) -> None:
    path = history_path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def record_failure(spec: StreamSpec, cause: str, detail: str, now: float | None = None) -> Decision:
    """Append the failure (with the last committed batch and its offsets) and ask the strategy.

    A decision not to restart is kept in the history (``gave_up``) so that no later run
    restarts a crash-looping stream behind a person's back; `reset_history` clears it.
    """
    now = time.time() if now is None else now
    status = read_status(status_path(spec.status_dir, spec.name))
    doc = read_history(spec)
    doc["failures"].append(asdict(Failure(now, cause, status.last_batch_id if status else None,
                                          status.end_offsets if status else {}, detail[:4000])))
    doc["failures"] = doc["failures"][-200:]
    decision = decide(spec.restart, [Failure(**f) for f in doc["failures"]], now)
    if not decision.restart:
        doc["gave_up"] = {"at": now, "reason": decision.reason}
    _write_history(spec, doc)
    return decision


def check_not_given_up(spec: StreamSpec) -> None:
    gave_up = read_history(spec).get("gave_up")
    if gave_up:
        raise CrashLoop(f"{spec.name}: the supervisor gave up at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(gave_up['at']))}"
                        f" UTC: {gave_up['reason']} -- after fixing the cause, run `rewind supervisor reset "
                        f"{spec.name}` (or trigger the supervisor with reset=true)")


def reset_history(spec: StreamSpec) -> None:
    _write_history(spec, {"failures": [], "gave_up": None})


def recover_checkpoint(spec: StreamSpec, s3_store: Any = None) -> dict[str, Any]:
    """Make the active checkpoint resumable: nothing / repair in place / restore the newest savepoint."""
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.checkpoints.repair import RepairRefused, repair_checkpoint, stream_running

    cp = Path(active_checkpoint(spec))
    if not (cp / "offsets").is_dir():
        return {"action": "none", "checkpoint": str(cp), "reason": "no checkpoint yet: the stream starts fresh"}
    report = inspect_checkpoint(cp)
    if not report.errors:
        return {"action": "none", "checkpoint": str(cp), "last_complete": report.last_complete,
                "reason": "checkpoint is complete" + ("" if not report.problems else
                                                      f" ({report.problems[0].detail})")}
    try:
        record = repair_checkpoint(cp, running=stream_running(spec))
        return {"action": "repaired", "checkpoint": str(cp), "last_complete": record["rolled_back_to_batch"],
                "quarantine": record.get("quarantine"), "moved": len(record["moved"]),
                "problems": record["problems"]}
    except RepairRefused as exc:
        if "no complete batch" not in str(exc) or s3_store is None:
            raise
        return restore_newest_savepoint(spec, s3_store, reason=str(exc))


def restore_newest_savepoint(spec: StreamSpec, store: Any, reason: str) -> dict[str, Any]:
    from rewind.checkpoints.savepoints import SavepointCorrupt, list_savepoints, restore_savepoint

    tried: list[str] = []
    for manifest in sorted(list_savepoints(store, spec.name).complete, key=lambda m: m.created_at, reverse=True):
        try:
            result = restore_savepoint(spec, store, manifest.savepoint_id)
        except SavepointCorrupt as exc:  # a damaged savepoint is skipped for the next newest
            tried.append(f"{manifest.savepoint_id}: {exc}")
            continue
        return {"action": "restored", "savepoint": manifest.savepoint_id, "batch": manifest.batch_id,
                "checkpoint": str(result.path), "reason": reason, "skipped_savepoints": tried}
    raise CrashLoop(f"{spec.name}: the checkpoint cannot be repaired ({reason}) and no valid savepoint exists"
                    + (f" (tried: {'; '.join(tried)})" if tried else "") + ". Nothing was changed.")


def wait_for_progress(spec: StreamSpec, pid: int, after_batch: int | None, timeout: float) -> dict[str, Any]:
    """Wait until the stream `pid` commits a batch newer than `after_batch` (or is caught up, lag 0)."""
    from rewind.platform.processes import pid_alive

    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = read_status(status_path(spec.status_dir, spec.name))
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
        if not pid_alive(pid):
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
            decision = record_failure(spec, exc.cause, str(exc))
            log.warning("%s: relaunch %d failed: %s; %s", spec.name, attempt, exc, decision.reason)
            if not decision.restart:
                raise CrashLoop(f"{spec.name}: {decision.reason}") from exc
            delay_s = decision.delay_s
