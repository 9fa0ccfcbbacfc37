"""The chaos run's injector: the schedule's faults one after another, each action a ``do_<name>``.

Why a role of its own: the schedule (`rewind.chaos.schedule`) says what to do and the actions
(`rewind.chaos.faults`, `rewind.chaos.data_faults`) how; this loop says when, and what happens
when a fault cannot be injected. Each fault waits until the producer has written the segments
before it, releases its own segment (unless it writes it itself, as a skewed backlog), and runs
its actions in order. A fault that fails is recorded in its ``rec`` (the report's
``every_fault_injected`` invariant fails on it), the supervisor is let go if the fault held it,
and the run goes on once the stream has settled; if it does not settle, the schedule stops
there. Every fault ends with the supervisor's recoveries that it caused attached to it, timed
from its SIGKILL or stop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rewind.chaos.data_faults import DataFaults
from rewind.chaos.faults import StreamFaults
from rewind.chaos.schedule import Action, Schedule
from rewind.chaos.supervisor import recovery_json

log = logging.getLogger(__name__)


class FaultInjector(StreamFaults, DataFaults):
    """Runs `schedule` on the run's state; `current` is the fault under way (the supervisor tags
    each recovery with it)."""

    schedule: Schedule
    facts: dict[str, Any]
    current: int | None

    def run_schedule(self) -> None:
        """Every fault of the schedule, in order, each recorded in ``facts["faults"]``."""
        assert self.producer is not None
        for fault in self.schedule.faults:
            rec: dict[str, Any] = {"index": fault.index, "kind": fault.kind, "params": fault.params,
                                   "injected": False, "error": None}
            self.facts["faults"].append(rec)
            if not self.producer.wait_produced(fault.starts_after, timeout=600):
                rec["error"] = f"the producer did not reach {fault.starts_after} events"
                break
            if fault.releases_at_start:
                self.producer.release_to(fault.releases)
            self.current = fault.index
            rec["started_at"] = time.time()
            log.info("chaos: %s", fault.describe())
            try:
                for action in fault.actions():
                    self.mark = time.time()
                    getattr(self, f"do_{action.name}")(action, rec, fault)
            except Exception as exc:  # noqa: BLE001 - recorded; the run goes on if the stream settles
                rec["error"] = f"{type(exc).__name__}: {exc}"
                log.exception("chaos: fault #%d %s failed", fault.index, fault.kind)
                if self.supervisor and self.supervisor.hold.locked() and rec.get("_held"):
                    self.supervisor.hold.release()
                self.producer.release_to(fault.releases)  # a backlog that was not written goes out as usual
                try:
                    self.do_await_settled(Action("await_settled"), rec, fault)
                except Exception as again:  # noqa: BLE001
                    rec["error"] += f"; and the stream did not settle: {again}"
                    break
            finally:
                rec.pop("_held", None)
                rec["ended_at"] = time.time()
                rec["seconds"] = round(rec["ended_at"] - rec["started_at"], 2)
                self._attach_recovery(rec)
        self.current = None

    def _attach_recovery(self, rec: dict[str, Any]) -> None:
        assert self.supervisor is not None
        mine = [r for r in self.supervisor.recoveries if r.fault == rec["index"]]
        rec["stream_failed"] = bool(mine)
        down_at = (rec.get("kill") or rec.get("stop") or {}).get("at") or rec["started_at"]
        rec["recoveries"] = [recovery_json(r, down_at) for r in mine]
        rec["recovery"] = rec["recoveries"][0] if rec["recoveries"] else None
