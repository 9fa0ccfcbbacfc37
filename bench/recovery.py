"""Recovery time of the supervisor: SIGKILL -> detected -> relaunched -> first new batch committed.

Prints one JSON object. Runs the real supervisor DAG (``dag.test()`` in this process: the same
tasks, trigger and spark-submit launch Airflow runs) against the embedded Kafka and S3 while a
producer keeps writing. Each run kills the stream's driver with SIGKILL after it has committed
new batches, and reads the times from the facts the platform records:

- detected: the failure the supervisor recorded (``<stream>.failures.json``, the trigger's time);
- relaunched: the new driver's ``started_at`` in the status file;
- first new batch: the first status of the new driver with a batch past the one at the kill;
- how busy the machine was in each step (``busy_cores`` per kill, ``median_busy_cores``, of ``machine.cores``);
- where the machine's CPU went from the kill to that batch, by process (``cpu_s`` per kill, ``median_cpu_s``): the
  new driver's JVM, its Python, its Python workers, the Kafka broker, this process (the supervisor's DAG run
  and the producer), processes that exited in between (the dead driver's JVM, Spark's launcher) and the rest;
- the split of that time (``split_s`` per kill, ``median_split_s``): ``to_spark_submit`` (the kill to the
  new driver's spark-submit JVM: detection, the restart delay, the relaunch task) and the new driver's own
  start-up steps from its status (``rewind.driver.startup``: jvm, python, checks, lease, session, query,
  first_batch).

``REWIND_CLASS_SHARING=off`` in the environment turns the class-data archive off for an A/B run (the JSON's
``driver``).

References measured in the same run: the cold start of the same stream (launch -> first batch), and
the same plan as a plain PySpark job SIGKILLed and restarted at once (``bench/plain_restart.py``, after the
stream is stopped: what Spark itself needs to come back on this machine). At the end every Kafka record is
checked against the sink.
Airflow's own log goes to ``<work>/bench.log``; stdout holds only the JSON.
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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import (  # noqa: E402
    CPU_ROLES,
    MachineLoad,
    SteadyProducer,
    cpu_by_role,
    cpu_snapshot,
    keep_stdout_for_json,
)
from plain_restart import plain_restarts  # noqa: E402

from tests.harness.dag_runs import watching  # noqa: E402


def watch_cold_start(spec: Any, t0: float, out: dict[str, float]) -> None:
    from rewind.control.status import read_status
    from rewind.paths import status_file

    while True:
        st = read_status(status_file(spec))
        if st and st.last_batch_id is not None and st.started_at >= t0 - 1:
            out["first_batch"] = time.time()
            return
        time.sleep(0.1)


#: A relaunch's steps in the order they happen (``split_s``).
STEPS = ("to_spark_submit", "jvm", "python", "checks", "lease", "session", "query", "first_batch")


def busy_by_step(load: MachineLoad, killed_at: float, split: dict[str, float]) -> dict[str, float | None]:
    """The machine's mean busy cores during each step of one relaunch (the steps laid end to end from the kill)."""
    out: dict[str, float | None] = {}
    at = killed_at
    for step in STEPS:
        if step in split:
            out[step] = load.mean_busy(at, at + max(split[step], 0.0))
            at += max(split[step], 0.0)
    return out


def kill_and_time(spec: Any, after_batch: int | None, out: dict[str, Any], dag_id: str) -> None:
    """Wait for progress past `after_batch` and for the supervisor to watch, SIGKILL the driver, then
    time the recovery."""
    from rewind.control.status import read_status
    from rewind.paths import status_file

    path = status_file(spec)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        st = read_status(path)
        # under the watch only: a kill before it meets the run's `launch`, which records a death it finds
        # ("found gone at launch") but is not the path this bench times
        if st and st.state == "running" and st.last_batch_id is not None and \
                (after_batch is None or st.last_batch_id >= after_batch + 2) and watching(dag_id):
            break
        time.sleep(0.2)
    else:
        out["error"] = "the stream made no progress to kill"
        return
    time.sleep(1.0)
    st = read_status(path)
    assert st is not None
    before = cpu_snapshot()
    out.update(pid=st.pid, batch=st.last_batch_id, killed_at=time.time())
    os.kill(st.pid, signal.SIGKILL)
    while time.monotonic() < deadline:
        now = read_status(path)
        if now and now.pid != st.pid and now.started_at > out["killed_at"]:
            out.setdefault("relaunched_at", now.started_at)
            if now.last_batch_id is not None and now.last_batch_id > out["batch"] and now.last_batch_at:
                out["first_batch_at"] = now.last_batch_at
                out["cpu_s"] = cpu_by_role(before, cpu_snapshot())
                out["startup"] = now.startup  # the new driver's own split (rewind.driver.startup)
                return
        time.sleep(0.1)
    out["error"] = "no new batch after the kill"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="kills (the median is reported)")
    ap.add_argument("--rate", type=int, default=500, help="events/s produced during the runs")
    ap.add_argument("--poll-s", type=float, default=2.0, help="the trigger's poll interval (registry default 2)")
    ap.add_argument("--plain-runs", type=int, default=3,
                    help="kills of the same plan as a plain PySpark job, restarted at once (0: none)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rewind-bench-recovery-"))
    out = keep_stdout_for_json(work / "bench.log")
    home = work / "airflow"
    os.environ.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                       "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                       "AIRFLOW__CORE__PLUGINS_FOLDER": str(work / "plugins")})
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, timeout=600)

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from rewind.supervision.failures import read_failures
    from rewind.supervision.process_control import stop_stream, wait_caught_up
    from tests.harness.registry_templates import demo_stream, write_registry

    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        topic = "recovery-events"
        # The registry's default restart strategy (exponential backoff: a lone crash is relaunched at once).
        reg = write_registry(work / "streams.yaml", demo_stream(
            "rec", topic, work, max_offsets=5000, trigger="1 second"))
        os.environ.update({**info.env(), "REWIND_REGISTRY": str(reg),
                           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                           "AIRFLOW_CONN_REWIND_KAFKA": json.dumps(
                               {"conn_type": "generic", "extra": {"bootstrap": info.kafka_bootstrap}})})
        produce(info.kafka_bootstrap, ProduceSpec(topic=topic, count=2000, partitions=2, id_prefix="seed"))
        spec = load_registry(reg).get("rec")
        from rewind_airflow.dags.factory import build_dags

        dag = build_dags(str(reg))["rewind_rec_supervisor"]
        producer = SteadyProducer(info.kafka_bootstrap, topic, args.rate, partitions=2, id_prefix="rec",
                                  first_seq=1_000_000)
        producer.start()
        runs: list[dict[str, Any]] = []
        cold: dict[str, float] = {}
        t0 = time.time()
        threading.Thread(target=watch_cold_start, args=(spec, t0, cold), daemon=True).start()
        load = MachineLoad()
        load.start()
        try:
            for i in range(args.runs):
                timing: dict[str, Any] = {}
                killer = threading.Thread(target=kill_and_time, args=(spec, runs[-1]["batch"] if runs else None,
                                                                      timing, dag.dag_id), daemon=True)
                killer.start()
                run = dag.test(run_conf={"chain": False, "watch_s": 900})
                killer.join(timeout=300)
                states = {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}
                failures = read_failures(spec)["failures"]
                detected = next((f["at"] for f in reversed(failures) if f["at"] >= timing.get("killed_at", 1e18)),
                                None)
                if "error" in timing or detected is None or "first_batch_at" not in timing:
                    raise RuntimeError(f"run {i}: {timing}, tasks {states}")
                k = timing["killed_at"]
                first = round(timing["first_batch_at"] - k, 2)
                steps = timing.get("startup") or {}
                runs.append({"batch": timing["batch"], "killed_at": round(k, 2), "detect_s": round(detected - k, 2),
                             "relaunch_s": round(timing["relaunched_at"] - k, 2), "first_batch_s": first,
                             # SIGKILL -> the new driver's spark-submit JVM: detection, restart delay, the launch
                             "split_s": {"to_spark_submit": round(first - sum(steps.values()), 2), **steps},
                             "cpu_s": timing["cpu_s"], "tasks": states})
                runs[-1]["busy_cores"] = busy_by_step(load, k, runs[-1]["split_s"])
        finally:
            load.stop.set()
            producer.stop.set()
            producer.join(timeout=60)
        wait_caught_up(spec, info.kafka_bootstrap, timeout=600)
        stop_stream(spec, timeout=90)
        report = verify_stream(spec, info.kafka_bootstrap)
        plain: dict[str, Any] | None = None
        if args.plain_runs:  # Spark's own restart, alone on the machine: the stream is stopped
            plain_topic = "recovery-plain"
            produce(info.kafka_bootstrap, ProduceSpec(topic=plain_topic, count=2000, partitions=2, id_prefix="pseed"))
            feeder = SteadyProducer(info.kafka_bootstrap, plain_topic, args.rate, partitions=2, id_prefix="plain",
                                    first_seq=1_000_000)
            feeder.start()
            try:
                plain = plain_restarts(info.kafka_bootstrap, plain_topic, reg, work / "plain", args.plain_runs,
                                       max_offsets=5000)
            finally:
                feeder.stop.set()
                feeder.join(timeout=60)

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 2)

    result = {
        "benchmark": "recovery", "runs": len(runs),
        "machine": {"cores": os.cpu_count(), "spark_master": "local[2]"},
        "poll_s": args.poll_s, "restart": "registry default (exponential-backoff: a crash after progress at once)",
        "produce_rate_eps": args.rate,
        "driver": {"class_sharing": os.environ.get("REWIND_CLASS_SHARING", "on")},
        "median_s": {"sigkill_to_detected": med("detect_s"), "sigkill_to_relaunched": med("relaunch_s"),
                     "sigkill_to_first_new_batch": med("first_batch_s")},
        "reference_cold_start_to_first_batch_s": round(cold["first_batch"] - t0, 2) if cold else None,
        "reference_plain_pyspark_restart": plain,
        "per_run": [{k: v for k, v in r.items() if k != "tasks"} for r in runs],
        "median_split_s": {k: round(statistics.median(r["split_s"].get(k, 0.0) for r in runs), 2)
                           for k in STEPS if runs and k in runs[0]["split_s"]},
        # CPU-seconds by process from the kill to the first new batch: with `machine.cores`, the least wall time
        # that work could take
        "median_cpu_s": {k: round(statistics.median(r["cpu_s"][k] for r in runs), 2) for k in CPU_ROLES if runs},
        # the machine's busy cores (of machine.cores) during each step: steps on busy cores are cut only by less work
        "median_busy_cores": {k: statistics.median(b) for k in STEPS
                              if (b := [r["busy_cores"][k] for r in runs if r["busy_cores"].get(k) is not None])},
        "exactly_once": {"ok": report.ok, "kafka_records": report.kafka_records},
        "log": str(work / "bench.log"),
    }
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
