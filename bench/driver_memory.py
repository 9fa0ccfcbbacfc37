"""The driver's peak memory against the size of a micro-batch: collected to the driver, or staged by the executors.

Prints one JSON object. 1,000,000 demo events (``--events``) are produced once to a 4-partition
topic; then, for each batch size (``--batches``, default 100,000 and 1,000,000 offsets per batch,
as ``maxOffsetsPerTrigger``) and each ``sink.write_from`` (``driver``: ``toArrow()`` and the sink
write in the driver; ``executors``: ``rewind.driver.staged_writer``), the demo stream runs
``--available-now`` over the whole topic into a fresh sink, in a fresh process: SQLite, or Delta
tables with ``--sinks delta`` (``executors``: ``rewind.driver.delta_writer``, delta-spark's MERGE).

Measured per run: the Python driver's peak RSS (its own ``VmHWM``, read as it exits), the peak
RSS of the JVM (sampled every 0.2 s; in ``local[2]`` it is driver and executor at once, with a
fixed heap) and of the Python workers together (sampled), the wall time, and the sink's row
count (a run that lost rows is not a measure). The reference is the same stream at the smaller
batch size: a driver whose memory is flat has the same peak at 10x the batch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import broker_description, keep_stdout_for_json  # noqa: E402

from rewind.driver.spark_conf import LOCAL_DEFAULTS  # noqa: E402

#: The Python worker daemons the workers are forked from: Spark's, or Rewind's preloading one.
DAEMONS = (b"pyspark.daemon", LOCAL_DEFAULTS["spark.python.daemon.module"].encode())


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> dict[int, bytes]:
    """pid -> cmdline of every process below ``root``."""
    parent: dict[int, int] = {}
    cmd: dict[int, bytes] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd[int(d.name)] = (d / "cmdline").read_bytes()
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out = {}
    for pid in cmd:
        p = pid
        while p > 1:
            p = parent.get(p, 0)
            if p == root:
                out[pid] = cmd[pid]
                break
    return out


class Sampler(threading.Thread):
    """Peak RSS of the JVM and of the Python workers below one process."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.jvm_mb, self.workers_mb, self.done = root, 0.0, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            procs = descendants(self.root)
            self.jvm_mb = max(self.jvm_mb, sum(rss_mb(p) for p, c in procs.items() if b"java" in c.split(b"\0")[0]))
            self.workers_mb = max(self.workers_mb, sum(rss_mb(p) for p, c in procs.items()
                                                       if any(d in c for d in DAEMONS)))
            time.sleep(0.2)


def child(registry: str, stream: str, bootstrap: str) -> None:
    """The measured process: the stream, available-now, then its own peak RSS on stdout."""
    from rewind.driver.driver import run_stream
    from rewind.registry import load_registry

    code = run_stream(load_registry(registry).get(stream), bootstrap, available_now=True)
    print(json.dumps({"exit": code, "python_driver_peak_mb": round(rss_mb(os.getpid(), "VmHWM"), 1)}))


def measure(work: Path, registry: Path, stream: str, bootstrap: str, env: dict[str, str]) -> dict[str, Any]:
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(registry), stream, bootstrap],
                            stdout=subprocess.PIPE, stderr=open(work / f"{stream}.log", "wb"), env=env)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, _ = proc.communicate(timeout=3600)
    sampler.done.set()
    result = json.loads(out.decode().strip().splitlines()[-1])
    return {**result, "jvm_peak_mb": round(sampler.jvm_mb, 1), "python_workers_peak_mb": round(sampler.workers_mb, 1),
            "seconds": round(time.perf_counter() - t, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batches", default="100000,1000000", help="offsets per batch (comma-separated)")
    ap.add_argument("--sinks", default="sqlite", help="sqlite and/or delta (comma-separated)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-drivermem-"))
    out = keep_stdout_for_json(work / "bench.log")

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from rewind.settings import python_path
    from tests.harness.registry_templates import demo_stream, write_registry

    sizes = [int(s) for s in args.batches.split(",")]
    runs = []
    with EmbeddedPlatform(work / "services") as plat:
        bootstrap = plat.info().kafka_bootstrap
        t = time.perf_counter()
        produce(bootstrap, ProduceSpec(topic="bench-drivermem", count=args.events, partitions=4, keyless=True))
        produce_s = time.perf_counter() - t
        env = {**os.environ, **plat.info().env(), "PYTHONPATH": python_path(), "PYSPARK_PYTHON": sys.executable}
        for sink in args.sinks.split(","):
            for size in sizes:
                for mode in ("driver", "executors"):
                    name = f"m{sink[0]}{mode[0]}{size}"
                    url = f"sqlite:///{work}/{name}.db" if sink == "sqlite" else f"delta://{work}/{name}"
                    entry = demo_stream(name, "bench-drivermem", work, max_offsets=size,
                                        sink=f'{{url: "{url}", table_prefix: {name}_, write_from: {mode}}}')
                    registry = write_registry(work / f"{name}.yaml", entry)
                    run = measure(work, registry, name, bootstrap, env)
                    report = verify_stream(load_registry(registry).get(name), bootstrap)
                    runs.append({"sink": sink, "write_from": mode, "batch_offsets": size, **run,
                                 "sink_events": report.sink_events, "proof_ok": report.ok})
    by = {(r["sink"], r["write_from"], r["batch_offsets"]): r["python_driver_peak_mb"] for r in runs}
    small, large = sizes[0], sizes[-1]
    doc = {"bench": "driver_memory", "broker": broker_description(), "cpus": os.cpu_count(), "events": args.events,
           "produce_seconds": round(produce_s, 1), "runs": runs,
           "python_driver_peak_ratio_large_to_small": {
               f"{k}/{m}": round(by[(k, m, large)] / max(by[(k, m, small)], 1e-9), 2)
               for k in args.sinks.split(",") for m in ("driver", "executors")},
           "work": str(work)}
    print(json.dumps(doc, indent=1), file=out)
    out.flush()


if __name__ == "__main__":
    main()
