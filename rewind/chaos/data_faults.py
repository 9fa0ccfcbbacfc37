"""The chaos run's fault actions that move data: savepoints cut by S3, replays, skewed backlogs.

They are ``do_<name>`` methods of the run, like those of `rewind.chaos.faults` (which has why,
and the state they share, `rewind.chaos.faults.RunState`):

- ``savepoint_cut``: S3 unavailable for a few seconds in the middle of a savepoint. Savepoints
  reach S3 through `rewind.chaos.fault_proxy.FaultProxy`, armed to reset every connection once a
  share of the savepoint's bytes has passed; ``check_savepoints`` then proves the interrupted
  copy invisible (no manifest) and the savepoint taken once S3 is back complete.
- ``replay``: `rewind replay run` of a random already-processed range beside the running stream
  (its own Spark job and proof), as a subprocess, the way a person runs it.
- ``produce_backlog`` and ``await_caught_up``: with the stream stopped and the supervisor held,
  the fault's segment written as skewed backlogs (`rewind.chaos.backlog.skew_backlog`) behind the
  watermark the stream stopped at (``batchWatermarkMs`` of its newest offsets file); then, once
  the stream has committed every offset of it, how many records it routed as
  ``behind_watermark``, against how many the layout put there (`rewind.chaos.known_set.backlog_behind`).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from rewind.api.late import BEHIND_WATERMARK
from rewind.chaos.backlog import skew_backlog
from rewind.chaos.faults import RunState, newest_id
from rewind.chaos.known_set import backlog_behind
from rewind.chaos.schedule import Action, Fault
from rewind.checkpoints.inspection import resume_files
from rewind.checkpoints.logs import parse_offsets_file
from rewind.checkpoints.manifest import FILES_DIR, savepoint_prefix
from rewind.checkpoints.savepoint_errors import SavepointError
from rewind.checkpoints.savepoints import create_savepoint, list_savepoints
from rewind.kafka.lookups import true_end_offsets
from rewind.runtime.processes import pid_alive, terminate_group
from rewind.settings import python_path
from rewind.storage import S3Error

log = logging.getLogger(__name__)

#: A skewed restart keeps the stream down until its backlog's newest event time is this far in the
#: past (Kafka timestamps in the future are refused by brokers beyond a limit, and an event time
#: ahead of the clock would move the watermark past the next segment's events), at most OUTAGE_MAX_S.
OUTAGE_MARGIN_S = 1.0
OUTAGE_MAX_S = 300.0


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class DataFaults(RunState):
    """The actions on savepoints and S3, replays, and skewed backlogs."""

    def do_savepoint(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        deadline = time.monotonic() + float(a.args.get("retry_s", 0.0))
        attempts, t = 0, time.time()
        while True:
            attempts += 1
            try:
                m = create_savepoint(self.spec, self.store)
                break
            except (S3Error, SavepointError) as exc:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"savepoint failed after {attempts} attempt(s): {exc}") from exc
                time.sleep(1.0)
        sp = {"savepoint_id": m.savepoint_id, "batch": m.batch_id, "files": len(m.files), "bytes": m.total_bytes,
              "attempts": attempts, "seconds": round(time.time() - t, 2), "at": time.time()}
        self.savepoints.append(sp)
        rec.setdefault("savepoints", []).append(sp)

    def do_savepoint_cut(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        assert self.proxy is not None
        cp = self.checkpoint()
        for attempt in range(3):  # Spark's cleanup may remove a file between the listing and the stat
            try:
                total = sum((cp / rel).stat().st_size for rel in resume_files(cp))
                break
            except (FileNotFoundError, ValueError):
                if attempt == 2:
                    raise
                time.sleep(0.5)
        cut_after = max(1, int(total * float(a.args["cut_fraction"])))
        n_cuts = len(self.proxy.cuts)
        self.proxy.arm(cut_after, float(a.args["outage_s"]))
        t = time.time()
        info: dict[str, Any] = {"bytes_estimate": total, "cut_after_bytes": cut_after, "outage_s": a.args["outage_s"]}
        try:
            m = create_savepoint(self.spec, self.store)
            info.update(interrupted=False, completed_anyway=m.savepoint_id)
        except (S3Error, SavepointError) as exc:
            info.update(interrupted=True, error=f"{type(exc).__name__}: {str(exc)[:300]}",
                        failed_after_s=round(time.time() - t, 2))
        finally:
            self.proxy.disarm()
        cuts = self.proxy.cuts[n_cuts:]
        info["cut"] = asdict(cuts[0]) if cuts else None
        rec["s3"] = info
        if not cuts or not info["interrupted"]:
            raise RuntimeError(f"the savepoint ({total} bytes) finished before the S3 cut at {cut_after} bytes")
        rec["injected"] = True

    def do_await_s3(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        assert self.proxy is not None
        time.sleep(self.proxy.seconds_down_left())

    def do_check_savepoints(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        listing = list_savepoints(self.store, self.spec.name)
        complete = {m.savepoint_id: m for m in listing.complete}
        interrupted = [i.savepoint_id for i in listing.incomplete
                       if i.newest.timestamp() >= rec["started_at"] - 5]
        after = rec["savepoints"][-1]["savepoint_id"]
        m = complete.get(after)
        missing: list[str] = []
        if m is not None:
            prefix = savepoint_prefix(self.spec.name, after) + FILES_DIR
            sizes = {f.path[len(prefix):]: f.size for f in self.store.list_files(prefix)}
            missing = [e.path for e in m.files if sizes.get(e.path) != e.size]
        ok = m is not None and not missing and not (set(interrupted) & set(complete))
        rec["s3"].update(
            ok=ok, interrupted_copies=interrupted, savepoint_after=after,
            retry_attempts=rec["savepoints"][-1]["attempts"],
            complete_savepoints=len(complete), missing_files=missing[:5],
            summary=(f"savepoint cut after {rec['s3']['cut']['after_bytes']} of ~{rec['s3']['bytes_estimate']} bytes "
                     f"failed in {rec['s3'].get('failed_after_s')}s ({len(interrupted)} partial copy without "
                     f"manifest, not listed as a savepoint); {after} taken after S3 came back "
                     f"({rec['savepoints'][-1]['attempts']} attempt(s)) " + ("is complete" if ok else
                                                                               f"is NOT complete: {missing[:3]}")))

    def do_replay(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:

        st = self.status()
        if st is None or st.state != "running" or not pid_alive(st.pid):
            raise RuntimeError("the stream is not running: a replay beside it cannot be injected")
        lo, hi = float(a.args["start_fraction"]), float(a.args["end_fraction"])
        start: dict[str, dict[str, int]] = {}
        end: dict[str, dict[str, int]] = {}
        for topic, parts in st.end_offsets.items():
            for p, committed in parts.items():
                if int(committed) < 2:
                    continue
                s = int(int(committed) * lo)
                e = max(s + 1, min(int(committed), int(int(committed) * hi)))
                start.setdefault(topic, {})[str(p)] = s
                end.setdefault(topic, {})[str(p)] = e
        if not start:
            raise RuntimeError(f"nothing processed to replay yet (committed {st.end_offsets})")
        replay_id = f"chaos-{fault.index}"

        run_dir = self.work / "replays" / replay_id
        argv = [sys.executable, "-m", "rewind.cli", "replay", "run", self.spec.name, "--registry",
                str(self.registry), "--bootstrap", self.bootstrap, "--from", json.dumps(start), "--to",
                json.dumps(end), "--replay-id", replay_id, "--run-dir", str(run_dir), "--no-s3", "--no-progress",
                "--json"]
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.stream_env(), "PYTHONPATH": python_path()}
        t = time.time()
        with open(run_dir / "replay.log", "wb") as err:
            self.replay_proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env,
                                                start_new_session=True)
            rec["injected"] = True
            try:
                out, _ = self.replay_proc.communicate(timeout=900)
            except subprocess.TimeoutExpired:
                terminate_group(self.replay_proc.pid, 10)
                raise
            finally:
                code = self.replay_proc.wait()
                self.replay_proc = None
        report: dict[str, Any] = {}
        for line in reversed(out.decode(errors="replace").splitlines()):
            if line.startswith("{"):
                try:
                    report = json.loads(line)
                    break
                except ValueError:
                    continue
        counts = report.get("counts", {})
        proof_ok = bool((report.get("proof") or {}).get("ok"))
        rec["replay"] = {"replay_id": replay_id, "from": start, "to": end, "exit_code": code,
                         "status": report.get("status"), "records_read": counts.get("records_read"),
                         "written": counts.get("written"), "already_present": counts.get("already_present"),
                         "proof_ok": proof_ok, "ok": code == 0 and proof_ok,
                         "seconds": round(time.time() - t, 2), "log": str(run_dir / "replay.log"),
                         "report": str(run_dir / "report.json")}
        if code != 0:
            raise RuntimeError(f"replay {replay_id} exited {code}; see {run_dir / 'replay.log'}")

    def _watermark_at_stop(self) -> tuple[int, str]:
        """The watermark the next batch judges lateness by: ``batchWatermarkMs`` of the newest offsets file."""

        cp = self.checkpoint()
        newest = newest_id(cp / "offsets")
        if newest is None:
            raise RuntimeError(f"{cp} has no offset log: no watermark to put a backlog behind")
        meta, _ = parse_offsets_file((cp / "offsets" / str(newest)).read_text())
        return int(meta.get("batchWatermarkMs") or 0), f"offsets/{newest}"

    def _behind_coords(self) -> set[tuple[str, int, int]]:

        dead = self.sink.read_table("dead_letter")
        if not len(dead):
            return set()
        late = dead[dead["reason"] == BEHIND_WATERMARK]
        return set(zip(late["topic"], late["partition"].astype(int), late["offset"].astype(int)))

    def _end_offsets(self) -> dict[str, int]:

        return {f"{tp.topic}/{tp.partition}": o for tp, o in true_end_offsets(self.bootstrap, self.spec.topics).items()}

    def do_produce_backlog(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        """While the stream is down: the fault's segment as skewed backlogs, through the producer."""
        assert self.producer is not None
        delay_ms = int(self.spec.durations()["watermark_delay"].total_seconds() * 1000)
        watermark_ms, where = self._watermark_at_stop()
        if watermark_ms <= 0:
            raise RuntimeError(f"{where} records no watermark yet: nothing to put a backlog behind")
        plan = skew_backlog(a.args, fault.starts_after, fault.releases, self.spec.partitions, watermark_ms, delay_ms)
        # The outage lasts until the backlog's newest event time is in the past.
        outage = min(OUTAGE_MAX_S, max(0.0, plan.newest_ms / 1000 + OUTAGE_MARGIN_S - time.time()))
        time.sleep(outage)
        before = self._end_offsets()
        behind_before = self._behind_coords()
        errors = len(self.producer.errors)
        t = time.time()
        self.producer.queue_backlog(plan)
        self.producer.release_to(fault.releases)
        if not self.producer.wait_produced(fault.releases, timeout=600):
            raise RuntimeError(f"the producer did not write the backlog (seq {plan.start_seq}..{plan.end_seq - 1})")
        if len(self.producer.errors) > errors:
            raise RuntimeError(f"the backlog was not fully written: {self.producer.errors[errors:][:2]}")
        report = self.producer.backlog_reports.get(plan.start_seq, {})
        after = self._end_offsets()
        topic = self.spec.topics[0]
        iso = _iso_ms
        rec["skew"] = {
            "plan": plan.to_json(), "watermark_ms": watermark_ms, "watermark": iso(watermark_ms),
            "watermark_from": where, "delay_s": delay_ms / 1000, "lagging_partition": plan.lagging_partition,
            "lagging_event_times": [iso(plan.lag_from_ms), iso(plan.lag_to_ms)],
            "leading_event_times": [iso(plan.lead_from_ms), iso(plan.lead_to_ms)],
            "skew_s": round((plan.lead_from_ms - plan.lag_to_ms) / 1000, 1),
            "outage_s": round(time.time() - rec["stop"]["at"], 1), "waited_s": round(outage, 1),
            "written_s": round(time.time() - t, 2), "records": report.get("records"),
            "by_partition": report.get("by_partition"), "offsets": {f"{topic}/{p}": r for p, r in
                                                                  (report.get("offsets") or {}).items()},
            "end_offsets_before": before, "end_offsets": after,
            "expected_behind": backlog_behind(plan, self.knobs)}
        self.behind_before = behind_before
        log.info("chaos: backlog of %s records %s written after %.1fs down (watermark %s)", report.get("records"),
                 report.get("by_partition"), rec["skew"]["outage_s"], rec["skew"]["watermark"])

    def do_await_caught_up(self, a: Action, rec: dict[str, Any], fault: Fault) -> None:
        """Until the stream has committed every offset of the backlog; then count what it put behind the watermark."""
        assert self.supervisor is not None
        skew = rec["skew"]
        target = skew["end_offsets"]
        deadline = time.monotonic() + self.recovery_timeout_s + 300
        done: dict[str, int] = {}
        while time.monotonic() < deadline:
            st = self.status()
            done = {f"{t}/{p}": int(o) for t, parts in (st.end_offsets if st else {}).items() for p, o in parts.items()}
            if self.running_unattended(st) and all(done.get(k, -1) >= v for k, v in target.items()):
                break
            if self.supervisor.gave_up:
                raise RuntimeError(f"the supervisor gave up: {self.supervisor.gave_up}")
            time.sleep(0.3)
        else:
            raise TimeoutError(f"the stream did not catch up with the backlog ({target}) within "
                               f"{self.recovery_timeout_s + 300:.0f}s; committed {done}")
        skew["caught_up_s"] = round(time.time() - rec["stop"]["at"], 1)
        new = self._behind_coords() - self.behind_before
        ranges = skew["offsets"]
        skew["behind_watermark"] = len(new)
        skew["behind_from_backlog"] = sum(1 for t, p, o in new if (r := ranges.get(f"{t}/{p}")) and r[0] <= o < r[1])
        skew["behind_by_partition"] = {str(p): n for p, n in sorted(Counter(p for _, p, _ in new).items())}
        log.info("chaos: caught up with the backlog %.1fs after the stop; %d records behind the watermark",
                 skew["caught_up_s"], len(new))
