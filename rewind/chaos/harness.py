"""`rewind chaos STREAM`: run a stream under supervision through a seeded storm of faults, then prove it.

What runs (all on a throwaway platform in the report directory, so nothing of the real
stream -- its checkpoint, sink, topics -- is touched):

- the embedded S3 (SeaweedFS) and Apache Kafka (one KRaft broker), owned by this process, so the
  broker can be restarted (a controlled shutdown, then a start on the same ports and data);
  savepoints reach S3 through `rewind.chaos.fault_proxy.FaultProxy`, which can go dark;
- a copy of the stream's registry entry (same transform, trigger, window, watermark, source
  options, restart strategy, supervision thresholds) with its checkpoint, status and sink
  moved into the report directory and ``startingOffsets: earliest`` (the topic starts empty);
- a producer thread writing a known set of events, released segment by segment as the schedule
  advances (`rewind.chaos.producer`);
- the supervisor: a thread running the supervision loop the DAG runs, in-process
  (`rewind.chaos.supervisor`, which says why not ``dag.test()``);
- the injector (this thread, `rewind.chaos.injector`) running the seeded schedule's faults
  (`rewind.chaos.schedule`) one after another, each action a ``do_<name>`` method
  (`rewind.chaos.faults`, `rewind.chaos.data_faults`).

At the end: all events are released, the stream catches up and idles (its no-data batch
emits the windows its watermark closed), the supervisor stops, the stream stops gracefully,
and the Great Expectations proof (`rewind.proof.dq.run_proof`), the verifier
(`rewind.proof.verify.verify_stream`), the known-set comparison (`rewind.chaos.known_set.compare_known`)
and the stream's own per-batch late checks (``<stream>.late.jsonl`` beside its status) run over
everything (`rewind.chaos.evidence` reads them). The report (JSON and text) goes to the report
directory; `rewind.chaos.judge.judge` decides, `rewind.chaos.report.format_text` renders.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewind.chaos.evidence import kafka_facts, known_facts, read_late_checks
from rewind.chaos.fault_proxy import FaultProxy
from rewind.chaos.injector import FaultInjector
from rewind.chaos.known_set import ProducerKnobs, expected_records
from rewind.chaos.producer import ChaosProducer
from rewind.chaos.report import build_report, format_text
from rewind.chaos.schedule import ChaosConfig, Schedule, make_schedule
from rewind.chaos.supervisor import ChaosSupervisor, recovery_json
from rewind.chaos.timeline import check_timeline
from rewind.demo.producer import ensure_topic
from rewind.driver.runner import open_sink
from rewind.embedded.services import EmbeddedPlatform
from rewind.errors import Failed, Refused
from rewind.kafka.lookups import true_end_offsets
from rewind.paths import late_checks_path, status_file
from rewind.proof.dq import run_proof
from rewind.proof.suite import suite_of
from rewind.proof.verify import read_records, verify_stream
from rewind.registry import load_registry
from rewind.runtime.processes import pid_alive, terminate_group
from rewind.settings import rewind_home
from rewind.storage import S3Config, S3Storage
from rewind.supervision.failures import reset
from rewind.supervision.process_control import launch_stream, stop_stream, wait_running

log = logging.getLogger(__name__)

#: Default seconds of producing per segment (between two faults); sets the rate unless --rate.
SEGMENT_S = 12.0


class ChaosRefused(Refused, ValueError):
    """The stream cannot be put through chaos as asked; the message says why."""


class ChaosHarnessError(Failed, RuntimeError):
    """The harness itself could not complete (a service, a fault injector); not an invariant verdict."""


@dataclass
class ChaosOptions:
    stream: str
    registry: str | None = None
    config: ChaosConfig = field(default_factory=ChaosConfig)
    report_dir: Path | None = None
    sink_url: str | None = None
    rate: float | None = None  # events/s; default: a segment every SEGMENT_S
    recovery_timeout_s: float = 300.0
    lag_probe_s: float = 2.0
    knobs: ProducerKnobs = field(default_factory=ProducerKnobs)


def default_report_dir(stream: str, seed: int) -> Path:

    return rewind_home() / "chaos" / stream / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-seed{seed}"


class ChaosRun(FaultInjector):
    """One chaos session: set up the throwaway platform, run the schedule, finish, prove, report."""

    def __init__(self, opts: ChaosOptions) -> None:
        self.opts = opts
        self.config = opts.config
        self.recovery_timeout_s, self.knobs = opts.recovery_timeout_s, opts.knobs
        self.schedule: Schedule = make_schedule(opts.config)
        self.work = Path(opts.report_dir or default_report_dir(opts.stream, opts.config.seed)).resolve()
        self.facts: dict[str, Any] = {"faults": []}
        self.seconds: dict[str, float] = {}
        self.current: int | None = None
        self.mark = time.time()
        self.savepoints = []
        self.platform = None
        self.proxy = None
        self.producer = None
        self.supervisor = None
        self.sink = None
        self.replay_proc = None
        self.behind_before = set()

    # ------------------------------------------------------------ setup
    def write_registry(self) -> Path:
        import yaml


        src = load_registry(self.opts.registry).get(self.opts.stream)
        suite = suite_of(src)  # a stream left at the default whose tables are not the demo's gets 'contract'
        if suite != "exactly_once":
            raise ChaosRefused(f"stream {src.name}: dq_suite {suite!r}: the chaos harness proves the "
                               "'exactly_once' suite over the demo event format it produces")
        home = self.work / "home"
        home.mkdir(parents=True, exist_ok=True)
        body = src.model_dump(exclude={"name"})
        body["checkpoint"] = str(home / "checkpoints" / src.name)
        body["status_dir"] = str(home / "status")
        body["sink"]["url"] = self.opts.sink_url or f"sqlite:///{home}/sink-{src.name}.db"
        body["source"]["options"] = {**body["source"]["options"], "startingOffsets": "earliest"}
        if self.config.skewed_restarts and src.partitions < 2:
            raise ChaosRefused(f"stream {src.name}: a skewed restart writes unequal backlogs over the partitions; "
                               f"its topic has {src.partitions} (use --skewed-restarts 0)")
        path = self.work / "streams.yaml"
        path.write_text("# throwaway copy for `rewind chaos` (locations moved into the report directory)\n"
                        + yaml.safe_dump({"streams": {src.name: body}}, sort_keys=False))
        self.registry = path
        self.spec = load_registry(path).get(src.name)
        return path

    def stream_env(self) -> dict[str, str]:
        return {**self.platform.info().env(), "REWIND_LAG_PROBE_S": str(self.opts.lag_probe_s)}

    def start_stream(self) -> dict[str, Any]:
        """What the supervisor DAG's `launch` does, with `rewind stream run` instead of spark-submit."""

        t = time.time()
        pid = launch_stream(self.spec, self.registry, self.bootstrap, self.log_path, env=self.stream_env())
        st = wait_running(self.spec, pid, 240.0, self.log_path)
        return {"pid": st.pid, "launched_at": t, "running_at": time.time(), "log": str(self.log_path)}

    # ------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:

        t0 = time.time()
        self.work.mkdir(parents=True, exist_ok=True)
        self.facts["schedule_problems"] = check_timeline(self.schedule)
        self.expected = expected_records(self.config.events, self.opts.knobs)
        self.facts["expected"] = {"sends": self.expected.sends, "events": len(self.expected.event_ids),
                                  "dead_letters": self.expected.dead_letters, "malformed": self.expected.malformed,
                                  "late": self.expected.late, "duplicate_sends": self.expected.duplicate_sends}
        self.write_registry()
        self.facts["source"] = {"format": self.spec.source.format, "alignment_max_drift_ms":
                                self.spec.source.options.get("eventTimeAlignment.maxDriftMs")}
        self.log_path = self.work / "logs" / f"stream-{self.spec.name}.log"
        (self.work / "schedule.json").write_text(json.dumps(self.schedule.to_json(), indent=1))
        log.info("chaos %s: %d faults, report in %s", self.spec.name, len(self.schedule.faults), self.work)
        # Services are started from this (long-lived, main) thread: Linux ties their parent-death
        # signal to the thread that started them, and the broker restart happens here too.
        self.platform = EmbeddedPlatform(self.work / "services")
        try:
            info = self.platform.start()
            self.seconds["platform_start"] = time.time() - t0
            self.bootstrap = info.kafka_bootstrap
            self._setup_s3(info, S3Config, S3Storage)
            self._create_topics()
            self.sink = open_sink(self.spec)
            self.sink.create_tables()
            self._start_producer()
            self._launch_and_supervise()
            t = time.time()
            self.run_schedule()
            self.seconds["faults"] = time.time() - t
            t = time.time()
            self.finish()
            self.seconds["final_catch_up"] = time.time() - t
            t = time.time()
            self.prove()
            self.seconds["proof"] = time.time() - t
        except Exception as exc:
            self.facts["harness_error"] = f"{type(exc).__name__}: {exc}"
            log.exception("chaos run failed")
            error: Exception | None = exc
        else:
            error = None
        finally:
            self.teardown()
            self.seconds["total"] = time.time() - t0
        if error is not None:
            if self.supervisor is None:
                raise error
            try:
                self.write_report()
            except Exception:  # noqa: BLE001 - the original error is what matters
                log.exception("chaos: could not write the partial report")
            raise ChaosHarnessError(f"{self.facts['harness_error']} (partial report: {self.work / 'report.txt'})") \
                from error
        return self.write_report()

    def _setup_s3(self, info: Any, S3Config: Any, S3Storage: Any) -> None:
        from urllib.parse import urlparse


        up = urlparse(info.s3_endpoint)
        self.proxy = FaultProxy(up.hostname or "127.0.0.1", int(up.port or 80)).start()
        self.store = S3Storage(S3Config(info.bucket, self.proxy.url, info.s3_access_key, info.s3_secret_key,
                                      info.s3_region))

    def _create_topics(self) -> None:

        for topic in self.spec.topics:
            ensure_topic(self.bootstrap, topic, self.spec.partitions)

    def _start_producer(self) -> None:
        segment = self.config.events / (len(self.schedule.faults) + 1)
        rate = self.opts.rate or max(50.0, segment / SEGMENT_S)
        self.producer = ChaosProducer(self.bootstrap, self.spec.topics[0], self.spec.partitions, self.config.events,
                                      rate, self.opts.knobs)
        self.producer.release_to(self.schedule.first_release)
        self.producer.start()
        self.facts["producer_rate"] = rate

    def _launch_and_supervise(self) -> None:

        reset(self.spec)
        t = time.time()
        started = self.start_stream()
        self.supervisor = ChaosSupervisor(self.spec, self.start_stream, self.store, lambda: self.current,
                                          self.opts.recovery_timeout_s)
        self.supervisor.start()
        deadline = time.monotonic() + self.opts.recovery_timeout_s
        while time.monotonic() < deadline:
            st = self.status()
            if st and st.last_batch_id is not None and st.last_batch_at:
                self.seconds["cold_start_to_first_batch"] = st.last_batch_at - t
                log.info("chaos: stream running (pid %s), first batch after %.1fs", started["pid"],
                         st.last_batch_at - t)
                return
            time.sleep(0.3)
        raise RuntimeError(f"the stream committed no batch within {self.opts.recovery_timeout_s:.0f}s of its "
                           f"launch; see {self.log_path}")

    # ------------------------------------------------------------ the end
    def finish(self) -> None:
        """Release everything, wait for the producer and for the stream to catch up and idle, stop both."""

        assert self.producer is not None and self.supervisor is not None
        self.producer.release_to(self.config.events)
        self.producer.join(timeout=max(600.0, 3 * self.config.events / self.producer.rate))
        deadline = time.monotonic() + self.opts.recovery_timeout_s + 300
        end = {f"{tp.topic}/{tp.partition}": o for tp, o in true_end_offsets(self.bootstrap, self.spec.topics).items()}
        for topic, part, offset in self.producer.delivered:  # what the producer saw acknowledged, too
            key = f"{topic}/{part}"
            end[key] = max(end.get(key, 0), offset + 1)
        trigger = self.spec.durations()["trigger"].total_seconds()
        done: dict[str, int] = {}
        caught = False
        while time.monotonic() < deadline:
            st = self.status()
            done = {f"{t}/{p}": int(o) for t, parts in (st.end_offsets if st else {}).items() for p, o in parts.items()}
            at_end = all(done.get(k, -1) >= v for k, v in end.items())
            if (at_end and st is not None and st.state == "running" and not self.supervisor.busy.is_set()
                    and st.last_batch_at and time.time() - st.last_batch_at > 3 * trigger + 1):
                caught = True
                break
            time.sleep(0.5)
        self.facts["caught_up"] = {"ok": caught, "detail": f"committed {done}, topic end {end}"
                                   + ("" if caught else " (not reached)")}
        self.supervisor.stop()
        self.supervisor.join(timeout=self.opts.recovery_timeout_s + 60)
        stop_stream(self.spec, timeout=120)

    def prove(self) -> None:
        """The DQ proof, the verifier, the known-set comparison and the late checks, over everything."""

        proof = run_proof(self.spec, self.bootstrap, run_dir=self.work / "dq", s3=self.store,
                          run_id=f"chaos-seed{self.config.seed}")
        self.facts["proof"] = {"ok": proof.ok, "expectations": proof.expectations,
                               "failures": [f.name for f in proof.failures], "counts": proof.counts,
                               "result": proof.local.get("proof"), "data_docs": proof.local.get("data_docs"),
                               "s3": proof.s3, "s3_error": proof.s3_error}
        ver = verify_stream(self.spec, self.bootstrap)
        self.facts["verify"] = ver.summary()
        records = read_records(self.bootstrap, self.spec.topics, source_options=self.spec.source.options)
        assert self.producer is not None
        self.facts["kafka"] = kafka_facts(records, self.producer.delivered)
        self.facts["known"] = known_facts(self.expected, records, self.sink.read_table("events"),
                                          self.sink.read_table("dead_letter"),
                                          self.spec.durations()["allowed_lateness"])
        path = late_checks_path(status_file(self.spec))
        self.facts["late_checks"] = read_late_checks(path, self.status())

    def teardown(self) -> None:

        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor.join(timeout=30)
        if self.replay_proc is not None and self.replay_proc.poll() is None:
            terminate_group(self.replay_proc.pid, 10)
        st = self.status() if hasattr(self, "spec") else None
        if st is not None and pid_alive(st.pid):
            terminate_group(st.pid, 30)
        if self.producer is not None:
            self.producer.stop()
            self.producer.join(timeout=70)
            self.facts["producer"] = {"acknowledged": self.producer.acknowledged, "errors": self.producer.errors,
                                      "produced_seq": self.producer.produced,
                                      "seconds": round(self.producer.seconds, 1), "rate": self.producer.rate}
        if self.proxy is not None:
            self.proxy.stop()
        if self.sink is not None:
            self.sink.dispose()
        if self.platform is not None:
            self.platform.stop()

    def write_report(self) -> dict[str, Any]:
        assert self.supervisor is not None
        self.facts["schedule"] = self.schedule.to_json()
        self.facts["supervisor"] = {"gave_up": self.supervisor.gave_up, "errors": self.supervisor.errors,
                                    "recoveries": [recovery_json(r, r.detected_at)
                                                   for r in self.supervisor.recoveries]}
        paths = {"report_json": str(self.work / "report.json"), "report_text": str(self.work / "report.txt"),
                 "proof_dir": str(self.work / "dq"), "logs": str(self.log_path), "registry": str(self.registry)}
        report = build_report(self.spec.name, self.facts, self.seconds, self.savepoints, {"cores": os.cpu_count()},
                              paths)
        (self.work / "report.json").write_text(json.dumps(report, indent=1, default=str))
        text = format_text(report)
        (self.work / "report.txt").write_text(text + "\n")
        report["text"] = text
        return report


def run_chaos(opts: ChaosOptions) -> dict[str, Any]:
    """Run one chaos session; returns the report (``report["ok"]`` is the verdict)."""
    return ChaosRun(opts).run()
