"""Recovery with a warm standby: SIGKILL -> first new batch, against a relaunch in the same run.

Prints one JSON object. The demo stream runs on the embedded Kafka while a producer keeps writing
(``--rate`` events/s). Each round kills the running driver's whole process group with SIGKILL
after it has committed new batches, alternating two ways back:

- ``standby``: a ``rewind stream run --standby`` started beforehand (warmed, waiting on the
  driver lock) takes over; a new standby is started for the next standby round.
- ``relaunch``: the reference, what a supervisor does without a standby: the same command is
  started right after the kill (no detection or restart delay counted: the best case).

Times come from the stream's status file: ``takeover`` is the new driver's ``started_at`` (the
moment it holds the lock), ``first_batch`` the first status past the batch at the kill. The
medians of each way and their ratio are reported. At the end every Kafka record is checked
against the sink. Spark's and the producer's logs go to ``<work>/bench.log`` and one log per
driver; stdout holds only the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import SteadyProducer, broker_description, keep_stdout_for_json  # noqa: E402


class Driver:
    """``spark_jobs/stream.py`` (what spark-submit runs) as a process group of its own."""

    def __init__(self, work: Path, registry: Path, name: str, bootstrap: str, env: dict[str, str], n: int,
                 standby: bool) -> None:
        from spark_jobs import STREAM_JOB

        self.log = work / f"driver-{n}{'-standby' if standby else ''}.log"
        argv = [sys.executable, str(STREAM_JOB), name, "--registry", str(registry), "--bootstrap", bootstrap]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv + (["--standby"] if standby else []), stdout=out,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        from rewind.runtime.processes import terminate_group

        if self.proc.poll() is None:
            terminate_group(self.proc.pid, grace=40.0)


def wait(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6, help="kills, alternating standby and relaunch (even: as many)")
    ap.add_argument("--rate", type=int, default=500, help="events/s produced during the rounds")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rewind-bench-standby-"))
    out = keep_stdout_for_json(work / "bench.log")
    from rewind.control.driver_lease import read_standby
    from rewind.control.status import read_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.paths import status_file
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from rewind.supervision.process_control import wait_caught_up
    from tests.harness.registry_templates import demo_stream, write_registry

    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        topic, name = "standby-events", "sb"
        reg = write_registry(work / "streams.yaml", demo_stream(name, topic, work, max_offsets=5000,
                                                                 trigger="1 second"))
        spec = load_registry(reg).get(name)
        spath = status_file(spec)
        env = {**os.environ, **info.env(), "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=2000, partitions=3, id_prefix="seed"))
        producer = SteadyProducer(info.kafka_bootstrap, topic, args.rate, partitions=3, id_prefix="sb", keyless=True)
        producer.start()
        n = 0
        launched = time.time()
        driver = Driver(work, reg, name, info.kafka_bootstrap, env, n, standby=False)
        first = wait(lambda: (st := read_status(spath)) and st.last_batch_at and st.pid == driver.proc.pid and st,
                     300, "the cold start's first batch")
        cold_start_s = round(first.last_batch_at - launched, 2)
        rounds: list[dict[str, Any]] = []
        standby: Driver | None = None
        try:
            for i in range(args.rounds):
                way = "standby" if i % 2 == 0 else "relaunch"
                if way == "standby":
                    n += 1
                    standby = Driver(work, reg, name, info.kafka_bootstrap, env, n, standby=True)
                    ready = wait(lambda: read_standby(spec).get("state") == "ready",
                                 300, "the standby ready")
                    assert ready
                start = read_status(spath)
                assert start is not None and start.last_batch_id is not None
                wait(lambda: (st := read_status(spath)) and st.last_batch_id >= start.last_batch_id + 2,  # noqa: B023
                     300, "two new batches before the kill")
                time.sleep(0.5)
                at_kill = read_status(spath)
                assert at_kill is not None
                killed = time.time()
                driver.kill()
                if way == "relaunch":
                    n += 1
                    driver = Driver(work, reg, name, info.kafka_bootstrap, env, n, standby=False)
                else:
                    assert standby is not None
                    driver, standby = standby, None
                new = wait(lambda: (st := read_status(spath)) and st.pid == driver.proc.pid  # noqa: B023
                           and st.last_batch_id is not None and st.last_batch_id > at_kill.last_batch_id  # noqa: B023
                           and st.last_batch_at and st, 300, f"round {i}: the first new batch")
                rounds.append({"way": way, "batch_at_kill": at_kill.last_batch_id,
                               "takeover_s": round(new.started_at - killed, 2),
                               "first_batch_s": round(new.last_batch_at - killed, 2)})
                print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
        finally:
            producer.stop.set()
            producer.join(timeout=60)
        wait_caught_up(spec, info.kafka_bootstrap, timeout=600)
        driver.stop()
        if standby is not None:
            standby.stop()
        report = verify_stream(spec, info.kafka_bootstrap)

    def med(way: str, key: str) -> float | None:
        values = [r[key] for r in rounds if r["way"] == way]
        return round(statistics.median(values), 2) if values else None

    result = {
        "benchmark": "standby", "rounds": len(rounds), "broker": broker_description(),
        "machine": {"cores": os.cpu_count(), "spark_master": "local[2]",
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "produce_rate_eps": args.rate,
        "median_s": {"standby_sigkill_to_takeover": med("standby", "takeover_s"),
                     "standby_sigkill_to_first_new_batch": med("standby", "first_batch_s"),
                     "relaunch_sigkill_to_first_new_batch": med("relaunch", "first_batch_s")},
        "reference_cold_start_to_first_batch_s": cold_start_s,
        "per_round": rounds,
        "exactly_once": {"ok": report.ok, "kafka_records": report.kafka_records,
                         "sink_events": report.summary()["sink_events"]},
        "log": str(work / "bench.log"),
    }
    s, r = result["median_s"]["standby_sigkill_to_first_new_batch"], result["median_s"][
        "relaunch_sigkill_to_first_new_batch"]
    result["ratio_standby_to_relaunch"] = round(s / r, 3) if s and r else None
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
