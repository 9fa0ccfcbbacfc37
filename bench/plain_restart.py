"""The reference for ``bench/recovery.py``: the same plan as a plain PySpark job, SIGKILLed and restarted at once.

What Spark itself needs to come back on this machine, with nothing of Rewind's around it: the job of
``bench/plain_job.py`` (the stream's transform over Spark's Kafka source, a careful ``foreachBatch`` into
SQLite, Rewind's Spark settings, trigger 0) on the same topic, with its own checkpoint and database. Each run
waits for the job to commit three more batches, SIGKILLs its Python driver (its JVM ends with it), starts the
same command at once (no detection, no supervisor: the best a relaunch can do) and times the SIGKILL to the
first batch committed past the one before the kill (polled in the job's ``batches`` table every 50 ms), and
where the machine's CPU went in between (``common.cpu_by_role``: the same roles as the stream's recovery).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import CPU_ROLES, cpu_by_role, cpu_snapshot

ROOT = Path(__file__).resolve().parents[1]


def _last_batch(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as con:
            row = con.execute("SELECT max(batch_id) FROM batches").fetchone()
    except sqlite3.Error:
        return -1
    return -1 if row is None or row[0] is None else int(row[0])


def _wait_batch_past(db: Path, batch: int, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _last_batch(db) > batch:
            return time.time()
        if proc.poll() is not None:
            raise RuntimeError(f"the plain job exited with {proc.returncode} (see its log)")
        time.sleep(0.05)
    raise RuntimeError(f"the plain job committed nothing past batch {batch} in {timeout_s:.0f}s")


def plain_restarts(bootstrap: str, topic: str, registry: Path, work: Path, runs: int,
                   max_offsets: int) -> dict[str, Any]:
    """SIGKILL -> first new batch of the plain job, ``runs`` times; its median and the per-run figures."""
    work.mkdir(parents=True, exist_ok=True)
    db = work / "plain.db"
    argv = [sys.executable, str(ROOT / "bench" / "plain_job.py"), "--bootstrap", bootstrap, "--topic", topic,
            "--checkpoint", str(work / "checkpoint"), "--db", str(db), "--max-offsets", str(max_offsets),
            "--settings", "rewind", "--continuous", "--stream-spec", str(registry)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    log = open(work / "plain.log", "ab")  # noqa: SIM115 - the job's output, for as long as the runs last

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)

    started = time.time()
    proc = launch()
    per_run: list[float] = []
    cpu: list[dict[str, float]] = []
    try:
        first = _wait_batch_past(proc=proc, db=db, batch=-1, timeout_s=300)
        cold = round(first - started, 2)
        for _ in range(runs):
            at = _last_batch(db)
            _wait_batch_past(db, at + 2, proc, 300)  # three more batches: steady, its state written
            batch = _last_batch(db)
            before = cpu_snapshot()
            killed = time.time()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = launch()
            per_run.append(round(_wait_batch_past(db, batch, proc, 300) - killed, 2))
            cpu.append(cpu_by_role(before, cpu_snapshot()))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    return {"what": "bench/plain_job.py --settings rewind --continuous: SIGKILL, restarted at once",
            "median_sigkill_to_first_new_batch_s": round(statistics.median(per_run), 2), "per_run_s": per_run,
            "cold_start_to_first_batch_s": cold,
            "median_cpu_s": {k: round(statistics.median(c[k] for c in cpu), 2) for k in CPU_ROLES if cpu},
            "per_run_cpu_s": cpu}
