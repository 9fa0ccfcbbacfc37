"""The chaos run's fault actions on the stream's process, its checkpoint and the broker.

The injector (`rewind.chaos.injector`, the main thread) runs each fault's actions
(`rewind.chaos.schedule.Fault.actions`) one after another as ``do_<name>`` methods of the run:
those that kill or stop the stream, damage its checkpoint, hold the supervisor, restart the
broker or wait for the stream are here (`StreamFaults`); those that move data -- a savepoint
cut by an S3 outage, a replay beside the stream, a skewed backlog -- are in
`rewind.chaos.data_faults`. Each records what it did in the fault's ``rec`` (the report's
``facts["faults"]``) and raises when it could not be injected.

Why methods over one shared state (`RunState`) and not functions of their own arguments: every
action needs the same handful of things the run set up (its stream spec, the supervisor it
holds, the producer, the services, the savepoints so far), and the timeline rules
(`rewind.chaos.timeline`) already fix the order in which they touch them.

The supervisor's ``hold`` is taken (``hold_supervisor``) while the stream is killed and its
checkpoint damaged, so no recovery starts on a half-written fault; the supervisor holds it for
a whole recovery, so an action never strikes in the middle of one.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewind.chaos.known_set import ProducerKnobs
from rewind.chaos.producer import ChaosProducer
from rewind.chaos.report import landing
from rewind.chaos.schedule import DAMAGES, Action, Fault
from rewind.chaos.supervisor import ChaosSupervisor, recovery_after
from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint
from rewind.control.status import read_status
from rewind.paths import status_file
from rewind.runtime.processes import pid_alive
from rewind.supervision.process_control import StreamControlError, stop_stream

if TYPE_CHECKING:
    from rewind.chaos.fault_proxy import FaultProxy
    from rewind.registry import StreamSpec
    from rewind.storage import S3Storage

log = logging.getLogger(__name__)

#: How long a kill waits for its moment (a batch in flight, a half-done commit) before falling back.
MOMENT_TIMEOUT_S = 45.0


def newest_id(d: Path) -> int | None:
    """The newest batch id of a checkpoint log folder (``offsets/``, ``commits/``), by name only."""
    try:
        ids = [int(n) for n in os.listdir(d) if n.isdigit()]
    except FileNotFoundError:
        return None
    return max(ids) if ids else None


def _kill_group(pid: int, timeout: float = 30.0) -> None:
    """SIGKILL the stream's process group (driver, JVM, Python workers) and wait for the driver."""

    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


class RunState:
    """What the fault actions share with the run (`rewind.chaos.harness.ChaosRun` sets it up), and
    the reads of the stream they all make: its status, its active checkpoint, where its batches are."""

    spec: StreamSpec  # the throwaway copy of the stream
    registry: Path  # the copy's registry file
    bootstrap: str
    work: Path  # the report directory
    recovery_timeout_s: float
    knobs: ProducerKnobs
    platform: Any  # rewind.embedded.services.EmbeddedPlatform: the broker restarts through it
    proxy: FaultProxy | None  # S3 reached through it, so that it can go dark
    store: S3Storage  # savepoints, through `proxy`
    sink: Any
    producer: ChaosProducer | None
    supervisor: ChaosSupervisor | None
    savepoints: list[dict[str, Any]]  # every savepoint taken, in order
    mark: float  # when the current action started
    behind_before: set[tuple[str, int, int]]  # behind_watermark dead letters before a backlog
    replay_proc: subprocess.Popen[bytes] | None

    def stream_env(self) -> dict[str, str]:
        """The environment of the stream's (and a replay's) processes; the run defines it."""
        raise NotImplementedError

    def running_unattended(self, st: Any) -> bool:
        """A driver runs (status ``running``, its pid alive) and no recovery is under way."""

        return (self.supervisor is not None and not self.supervisor.busy.is_set() and st is not None
                and st.state == "running" and pid_alive(st.pid))

    def await_running(self, failure: str, also: Callable[[Any], bool] = lambda st: True) -> None:
        """Until ``running_unattended`` and ``also(status)``; raises when the supervisor gave up, or
        ``TimeoutError(f"{failure} within N s")``."""
        deadline = time.monotonic() + self.recovery_timeout_s + 120
        while time.monotonic() < deadline:
            st = self.status()
            if self.running_unattended(st) and also(st):
                return
            if self.supervisor is not None and self.supervisor.gave_up:
                raise RuntimeError(f"the supervisor gave up: {self.supervisor.gave_up}")
            time.sleep(0.3)
        raise TimeoutError(f"{failure} within {self.recovery_timeout_s + 120:.0f}s")

    def status(self) -> Any:
        """The stream's status file as the driver last wrote it (None before the first write)."""

        return read_status(status_file(self.spec))

    def checkpoint(self) -> Path:
        """The checkpoint the stream runs on now (a restore moves the pointer)."""

        return Path(active_checkpoint(self.spec))

    def position(self) -> dict[str, Any]:
        """The newest planned and committed batch, the sink's ledger and the status: where a kill lands."""
        cp = self.checkpoint()
        st = self.status()
        return {"planned": newest_id(cp / "offsets"), "committed": newest_id(cp / "commits"),
                "sink_ledger": self.sink.last_committed_batch(), "status_batch": st.last_batch_id if st else None}


class StreamFaults(RunState):
    """The actions on the stream's process, its checkpoint, the supervisor and the broker."""

    def do_await_moment(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        moment, delay = a.args["moment"], float(a.args.get("delay_s", 0.0))
        asked = moment
        if self.supervisor is not None:
            # A kill that lands on a driver the supervisor is relaunching (after a stall, say) is replaced
            # by that recovery's own relaunch loop, and faults are judged one at a time (a CI rehearsal,
            # 2026-11-26: a stall after the broker restart, then the kill, then no new recovery to wait for).
            self.await_running("the supervisor stayed busy or no driver ran")
        deadline = time.monotonic() + MOMENT_TIMEOUT_S
        seen: dict[str, Any] | None = None
        if moment == "sink_committed":
            while time.monotonic() < deadline:
                pos = self.position()
                n = pos["sink_ledger"]
                if (n is not None and n > (pos["committed"] if pos["committed"] is not None else -1)
                        and n == pos["planned"]):
                    seen = pos
                    break
                time.sleep(0.003)
            if seen is None:
                moment, deadline = "batch_planned", time.monotonic() + MOMENT_TIMEOUT_S / 2
        if moment == "batch_planned":
            while time.monotonic() < deadline:
                pos = self.position()
                if pos["planned"] is not None and pos["planned"] > (pos["committed"] if pos["committed"] is not None
                                                                     else -1):
                    seen = pos
                    break
                time.sleep(0.01)
            if seen is None:
                moment = "random"
        time.sleep(delay if moment != "sink_committed" else 0.0)
        rec["moment"] = {"asked": asked, "used": moment, "seen": seen}

    def do_sigkill(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        st = self.status()
        if st is None or not pid_alive(st.pid):
            raise RuntimeError(f"no running stream to kill (status {st.state if st else None})")
        at = time.time()
        _kill_group(st.pid)
        pos = self.position()
        rec["kill"] = {"pid": st.pid, "at": at, "status_batch": st.last_batch_id, "position": pos,
                       "landed": landing(pos)}
        rec["injected"] = True
        log.info("chaos: killed pid %d %s", st.pid, rec["kill"]["landed"])

    def do_await_recovery(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        assert self.supervisor is not None
        since = (rec.get("kill") or rec["stop"])["at"]
        deadline = time.monotonic() + self.recovery_timeout_s + 120
        while time.monotonic() < deadline:
            found = recovery_after(self.supervisor.recoveries, since)
            if found is not None:
                if found.fault != rec["index"]:
                    log.info("chaos: fault #%d's driver was replaced by the recovery from %s detected %.1fs "
                             "before it", rec["index"], found.cause, since - found.detected_at)
                    found.fault = rec["index"]
                if found.error:
                    raise RuntimeError(f"recovery failed: {found.error}")
                return
            if self.supervisor.gave_up:
                raise RuntimeError(f"the supervisor gave up: {self.supervisor.gave_up}")
            time.sleep(0.2)
        raise TimeoutError(f"no recovery within {self.recovery_timeout_s + 120:.0f}s of the kill")

    def do_stop(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        """Stop the stream as an operator does (SIGTERM: it stops after the batch in flight commits)."""

        st = self.status()
        if st is None or st.state != "running" or not pid_alive(st.pid):
            raise RuntimeError(f"no running stream to stop (status {st.state if st else None})")
        at = time.time()
        note = None
        try:
            graceful = stop_stream(self.spec, timeout=90)
        except StreamControlError as exc:
            _kill_group(st.pid)
            graceful, note = False, str(exc)
        rec["stop"] = {"pid": st.pid, "at": at, "stopped_s": round(time.time() - at, 2), "graceful": graceful,
                       "status_batch": st.last_batch_id, "position": self.position(), "note": note}
        rec["injected"] = True
        log.info("chaos: stopped pid %d (%s) in %.1fs", st.pid, "graceful" if graceful else "killed",
                 time.time() - at)

    def do_hold_supervisor(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        assert self.supervisor is not None
        if not self.supervisor.hold.acquire(timeout=self.recovery_timeout_s + 60):
            raise TimeoutError("the supervisor stayed busy")
        rec["_held"] = True

    def do_release_supervisor(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        assert self.supervisor is not None
        self.supervisor.hold.release()
        rec["_held"] = False

    def do_corrupt(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        cp = self.checkpoint()
        report = inspect_checkpoint(cp)
        if not report.committed:
            raise RuntimeError(f"{cp} has no committed batch to damage")
        last = report.committed[-1]
        damage = a.args["damage"]
        files: list[str] = []
        note = None
        if damage == "empty_state":
            candidates = sorted(f for f in report.state_files if Path(f).name.startswith(f"{last + 1}."))
            if report.last_complete == last and candidates:
                rel = candidates[int(a.args["pick"] * len(candidates)) % len(candidates)]
                (cp / rel).write_bytes(b"")
                files.append(rel)
            else:
                note = (f"no state file of version {last + 1} to empty (last complete {report.last_complete}); "
                        "truncated offsets instead")
                damage = "truncate_offsets"
        if damage == "truncate_offsets":
            f = cp / "offsets" / str(last)
            data = f.read_bytes()
            f.write_bytes(data[: len(data) // 2])
            files.append(f"offsets/{last}")
        elif damage == "garbage_commit":
            (cp / "commits" / str(last)).write_bytes(b"\x00\xff not a commit \xfe\n")
            files.append(f"commits/{last}")
        elif damage == "no_complete_batch":
            for f in sorted((cp / "offsets").iterdir()):
                if f.name.isdigit():
                    f.write_bytes(b"")
                    files.append(f"offsets/{f.name}")
        rec["corruption"] = {"damage": damage, "asked": a.args["damage"], "batch": last, "files": files,
                             "expected": DAMAGES[damage], "checkpoint": str(cp), "note": note}
        log.info("chaos: %s on batch %d of %s (%d files)", damage, last, cp, len(files))

    def do_await_batches(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        """Until the stream has committed batch `at_least` (a roll-back needs a batch to roll back to)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            st = self.status()
            if st and st.state == "running" and (st.last_batch_id or 0) >= int(a.args["at_least"]):
                return
            time.sleep(0.3)
        raise TimeoutError(f"the stream did not reach batch {a.args['at_least']} within 180s")

    def do_await_progress(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        target = self.savepoints[-1]["batch"] + int(a.args.get("batches", 2))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            st = self.status()
            if st and st.last_batch_id is not None and st.last_batch_id >= target:
                return
            time.sleep(0.3)
        rec["note"] = f"the stream did not reach batch {target} after the savepoint; the restore rolls back less"

    def do_broker_stop(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        assert self.platform.kafka is not None
        t = time.time()
        self.platform.kafka.stop()
        rec["broker"] = {"stop_requested_at": t, "stopped_at": time.time()}
        rec["injected"] = True

    def do_pause(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        time.sleep(float(a.args["seconds"]))

    def do_broker_start(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        self.platform.kafka.start()
        rec["broker"]["started_at"] = time.time()
        rec["broker"]["down_s"] = round(rec["broker"]["started_at"] - rec["broker"]["stop_requested_at"], 2)

    def do_await_settled(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        """Until the supervisor is idle and the stream runs and has committed a batch (or is caught up)
        since the previous action ended."""
        since = self.mark
        self.await_running("the stream did not settle", lambda st: (st.last_batch_at or 0) > since
                           or ((st.lag_at or 0) > since and st.total_lag == 0))
