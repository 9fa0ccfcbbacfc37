"""The chaos run's supervisor: the supervisor DAG's loop, in a thread of the harness process.

What it runs, each ``supervision.poll``: `rewind.supervision.observe.observe`,
`rewind.supervision.health.evaluate` with the registry's thresholds (the trigger), and the
reconciler's steps `begin_restart` (stop a hung driver, record the failure, ask the restart
strategy), `recover_checkpoint` (repair, or restore the newest savepoint) and
`relaunch_until_progress` -- recording each recovery's timings (`Recovery`) on the way, which
the report turns into detected -> relaunched -> running -> first progress.

Why the DAG's functions in-process and not ``dag.test()`` of the supervisor DAG: the chaos
harness is a tool for any stream and lives in ``rewind/``, which never imports Airflow; the
DAG's tasks are thin wrappers of exactly these functions (rewind_airflow/operators/supervision.py),
and the DAG path itself is covered by tests/test_dags.py and bench/recovery.py. The one
difference: the DAG launches through spark-submit (`RewindStreamHook`), the harness through
`rewind.supervision.process_control.launch_stream` (``rewind stream run``), the same driver code.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewind.registry import parse_duration
from rewind.supervision.failures import CrashLoop
from rewind.supervision.health import evaluate, thresholds_of
from rewind.supervision.observe import observe
from rewind.supervision.reconcile import alert, begin_restart, recover_checkpoint, relaunch_until_progress

log = logging.getLogger(__name__)


@dataclass
class Recovery:
    """One recovery by the supervisor; the ``*_at`` are ``time.time()`` of its steps."""

    cause: str
    detail: str
    detected_at: float
    fault: int | None
    checkpoint: dict[str, Any] | None = None
    recover_s: float | None = None
    launched_at: float | None = None
    running_at: float | None = None
    progress_at: float | None = None
    first_batch: dict[str, Any] | None = None
    relaunches: int = 0
    error: str | None = None
    done: bool = False


class ChaosSupervisor(threading.Thread):
    """The supervisor DAG's loop (watch -> diagnose -> recover_checkpoint -> relaunch), in a thread.

    `hold` is taken by the injector while it kills and damages the checkpoint, so no recovery
    starts on a half-written fault; it is held by this thread for a whole recovery, so the
    injector never strikes in the middle of one.
    """

    def __init__(self, spec: Any, start: Callable[[], dict[str, Any]], store: Any,
                 current_fault: Callable[[], int | None], timeout_s: float) -> None:

        super().__init__(name="chaos-supervisor", daemon=True)
        self.spec, self.start_stream, self.store, self.current_fault = spec, start, store, current_fault
        self.timeout_s = timeout_s
        self.thresholds = thresholds_of(spec)
        self.poll_s = parse_duration(spec.supervision.poll).total_seconds()
        self.hold = threading.Lock()
        self.busy = threading.Event()
        self.stopping = threading.Event()
        self.recoveries: list[Recovery] = []
        self.gave_up: str | None = None
        self.errors: list[str] = []

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            with self.hold:
                if self.stopping.is_set():
                    break
                if self.gave_up is None:
                    try:
                        self.check_once()
                    except Exception as exc:  # noqa: BLE001 - keep watching; the report has it
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        log.exception("chaos supervisor")
            self.stopping.wait(self.poll_s)

    def check_once(self) -> None:
        """One pass of the supervision loop, as the DAG runs it: observe -> evaluate -> act, with
        the recovery's timings recorded step by step."""

        obs = observe(self.spec)
        verdict = evaluate(obs, self.thresholds)
        if verdict.action == "alert":
            alert(self.spec, verdict, obs.at)
        if verdict.action != "restart":
            return
        health = verdict.health
        self.busy.set()
        rec = Recovery(str(health.cause), health.detail, obs.at, self.current_fault())
        self.recoveries.append(rec)
        log.warning("supervisor: %s: %s", health.cause, health.detail)
        try:
            decision = begin_restart(self.spec, verdict, now=rec.detected_at)
            if not decision.restart:
                self.gave_up = rec.error = decision.reason
                return
            t = time.time()
            rec.checkpoint = recover_checkpoint(self.spec, self.store)
            rec.recover_s = time.time() - t
            after = obs.status.last_batch_id if obs.status else None
            started = relaunch_until_progress(self.spec, self.start_stream, after, decision.delay_s,
                                              timeout_s=self.timeout_s)
            rec.launched_at, rec.running_at = started["launched_at"], started["running_at"]
            rec.first_batch, rec.relaunches = started["first_batch"], started["relaunches"]
            rec.progress_at = time.time()
        except CrashLoop as exc:
            self.gave_up = rec.error = str(exc)
        except Exception as exc:  # noqa: BLE001
            rec.error = f"{type(exc).__name__}: {exc}"
            self.errors.append(f"recovery after {rec.cause}: {rec.error}")
            log.exception("supervisor: recovery failed")
        finally:
            rec.done = True
            self.busy.clear()


def recovery_after(recoveries: list[Recovery], since: float) -> Recovery | None:
    """The finished recovery that replaced a driver killed at ``since``: detected after the kill, or
    already under way then and (re)launched after it (its relaunch loop replaced the killed driver:
    the supervisor can turn busy between the harness's idle check and its kill)."""
    for r in recoveries:
        if r.done and (r.detected_at >= since or (r.launched_at or 0) >= since):
            return r
    return None


def recovery_json(r: Recovery, fault_at: float) -> dict[str, Any]:
    """A recovery as the report holds it: each step in seconds from `fault_at` (its fault's SIGKILL or
    stop, or its own detection)."""

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - fault_at, 2)

    return {"cause": r.cause, "detail": r.detail[:300], "fault": r.fault,
            "checkpoint_action": (r.checkpoint or {}).get("action"), "checkpoint": r.checkpoint,
            "recover_checkpoint_s": None if r.recover_s is None else round(r.recover_s, 2),
            "detect_s": since(r.detected_at), "relaunch_s": since(r.launched_at), "running_s": since(r.running_at),
            "progress_s": since(r.progress_at), "first_batch": r.first_batch, "relaunches": r.relaunches,
            "error": r.error}
