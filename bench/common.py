"""What every benchmark script shares (the scripts run as files, so this dir is on sys.path)."""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import IO


def keep_stdout_for_json(log: Path) -> IO[str]:
    """Send fd 1 and 2 (Spark's JVM, Airflow, services, children) to `log`; return a file on the
    real stdout, so the script's stdout holds only its JSON."""
    real = os.fdopen(os.dup(1), "w")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return real


def broker_description() -> str:
    """Which broker the embedded platform runs, from its jar's name (``kafka_2.13-4.1.1.jar``)."""
    from rewind.runtime.jars import jars_dir

    jars = sorted((jars_dir() / "kafka").glob("kafka_2.13-*.jar"))
    version = jars[-1].stem.split("-", 1)[1] if jars else "?"
    return f"Apache Kafka {version} (KRaft), one embedded broker"


class SteadyProducer(threading.Thread):
    """Keeps data arriving (``rate`` demo events/s in one-second bursts) so every restart has work
    waiting; ``stop`` ends it, ``sent`` counts what it sent."""

    def __init__(self, bootstrap: str, topic: str, rate: int, *, partitions: int, id_prefix: str,
                 first_seq: int = 0, keyless: bool = False) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.partitions, self.id_prefix, self.first_seq, self.keyless = partitions, id_prefix, first_seq, keyless
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from rewind.demo.producer import ProduceSpec, produce

        while not self.stop.is_set():
            t0 = time.monotonic()
            produce(self.bootstrap, ProduceSpec(topic=self.topic, count=self.rate, partitions=self.partitions,
                                                id_prefix=self.id_prefix, start_seq=self.first_seq + self.sent,
                                                keyless=self.keyless))
            self.sent += self.rate
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))


def add_conf_option(ap: argparse.ArgumentParser) -> None:
    """``--conf KEY=VALUE`` (repeatable): an extra Spark session setting, to measure it against the default."""
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark session setting (repeatable), to measure a change without editing rewind/")


def conf_pairs(ap: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    """The ``--conf`` items as a dict (a later key wins); refuses an item without ``=``."""
    bad = [c for c in items if "=" not in c]
    if bad:
        ap.error(f"--conf takes KEY=VALUE, got {bad[0]!r}")
    return dict(c.split("=", 1) for c in items)


def busy_idle() -> tuple[float, float]:
    """The machine's busy and idle CPU-seconds since boot, all cores (iowait counts as idle)."""
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle, idle


class MachineLoad(threading.Thread):
    """The machine's busy cores every ``interval_s`` (``psutil.cpu_times``), so a bench can say how loaded each
    step it times was: a step on busy cores is cut only by doing less, one beside an idle core also by overlap."""

    def __init__(self, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        cores = psutil.cpu_count() or 1
        last = busy_idle()
        while not self.stop.wait(self.interval_s):
            now = busy_idle()
            busy, idle = now[0] - last[0], now[1] - last[1]
            self.samples.append((time.time(), cores * busy / max(busy + idle, 1e-9)))
            last = now

    def mean_busy(self, start: float, end: float) -> float | None:
        """Mean busy cores over the samples that end within [start, end]; None when none does."""
        got = [b for t, b in self.samples if start < t <= end + self.interval_s / 2]
        return round(sum(got) / len(got), 2) if got else None


#: Who spent the machine's CPU during a recovery (``cpu_s``), in the order the JSON lists them.
CPU_ROLES = ("driver_jvm", "driver_python", "python_workers", "kafka_broker", "bench_and_supervisor", "exited",
             "other")


def _role(cmdline: list[str], pid: int) -> str:
    text = " ".join(cmdline)
    if pid == os.getpid():  # the bench: in recovery.py also the supervisor's DAG run and the producer
        return "bench_and_supervisor"
    if "org.apache.spark.deploy.SparkSubmit" in text:
        return "driver_jvm"
    if "spark_jobs/stream.py" in text or "bench/plain_job.py" in text:
        return "driver_python"
    if "python_daemon" in text or "pyspark.daemon" in text or "pyspark.worker" in text:
        return "python_workers"
    if "kafka.Kafka" in text or "/kafka/" in text:
        return "kafka_broker"
    return "other"


def cpu_snapshot() -> tuple[float, dict[int, tuple[str, float]]]:
    """The machine's busy CPU-seconds so far and each live process's (role, CPU-seconds): two of them say where
    a recovery's CPU went (``cpu_by_role``), at the cost of one pass over ``/proc`` each."""
    import psutil

    busy = busy_idle()[0]
    procs: dict[int, tuple[str, float]] = {}
    for p in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
        ct = p.info["cpu_times"]
        if ct is not None:
            procs[p.info["pid"]] = (_role(p.info["cmdline"] or [], p.info["pid"]), ct.user + ct.system)
    return busy, procs


def cpu_by_role(before: tuple[float, dict[int, tuple[str, float]]], after: tuple[float, dict[int, tuple[str, float]]]
                ) -> dict[str, float]:
    """CPU-seconds per role between two snapshots; a process gone by the second counts under ``exited``
    (the machine's busy time less what the live ones spent)."""
    out = dict.fromkeys(CPU_ROLES, 0.0)
    for pid, (role, cpu) in after[1].items():
        out[role] += cpu - before[1].get(pid, (role, 0.0))[1]
    out["exited"] = max(0.0, (after[0] - before[0]) - sum(out.values()))
    return {k: round(v, 2) for k, v in out.items()}
