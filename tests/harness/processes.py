"""A stream driver as a real child process, and the waits and looks the end-to-end tests need around it.

``StreamProcess`` runs ``spark_jobs/stream.py`` (what spark-submit runs) in its own process group,
so a test can SIGKILL the driver with its JVM as ``kill -9 -PGID`` would, or stop it as an operator
does (SIGTERM: the batch in flight finishes). Processes are looked at with ``psutil``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest

from rewind.driver.spark_conf import LOCAL_DEFAULTS
from rewind.runtime.processes import terminate_group
from spark_jobs import STREAM_JOB

ROOT = Path(__file__).resolve().parents[2]


#: The Python worker daemons' modules: Spark's, and Rewind's preloading one (``spark.python.daemon.module``).
DAEMONS = ("pyspark.daemon", LOCAL_DEFAULTS["spark.python.daemon.module"])


class StreamProcess:
    """``spark_jobs/stream.py NAME`` as a child in its own process group, logging to ``stream-run<N>.log``.

    ``env`` (e.g. the platform's, with S3 credentials) goes to every run; ``start(**extra)`` adds to one.
    """

    def __init__(self, registry: Path, name: str, bootstrap: str, log_dir: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.registry, self.name, self.bootstrap, self.log_dir = registry, name, bootstrap, log_dir
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self, *args: str, **extra_env: str) -> None:
        self.runs += 1
        env = {**os.environ, **self.env, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, **extra_env}
        with open(self.log_dir / f"stream-run{self.runs}.log", "wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(STREAM_JOB), self.name, "--registry", str(self.registry),
                                          "--bootstrap", self.bootstrap, *args],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the stream was never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver's process group (its JVM dies with it)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        assert self.proc is not None
        self.proc.wait(timeout=30)

    def stop(self, grace: float = 60.0) -> int | None:
        """SIGTERM to the driver (a graceful stop after the batch in flight), then the group's end; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                terminate_group(self.proc.pid, grace=10.0)
        try:  # the group (pgid = the driver's pid: a new session) may still hold the JVM or workers
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait(timeout=30)

    def log(self, run: int | None = None) -> str:
        path = self.log_dir / f"stream-run{run or self.runs}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def python_workers(self) -> list[int]:
        """The forked Python workers running the stream's tasks: children of the Python worker daemon (Spark's
        ``pyspark.daemon`` or Rewind's ``rewind.driver.python_daemon``, in a process group of its own below
        the driver's JVM), whose command line they keep."""
        def daemon(p: psutil.Process | None) -> bool:
            try:
                return p is not None and any(m in part for part in p.cmdline() for m in DAEMONS)
            except psutil.Error:
                return False

        try:
            below = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        workers = []
        for proc in below:
            try:
                if daemon(proc) and daemon(proc.parent()):
                    workers.append(proc.pid)
            except psutil.Error:
                continue
        return workers


def wait_for(cond: Callable[[], Any], timeout: float, what: str, proc: StreamProcess | None = None,
             *, exit_ok: bool = False) -> Any:
    """Poll ``cond`` until it holds and return what it returned; fail naming ``what`` (and the stream's log) on
    timeout, or at once when the stream exits first (unless ``exit_ok``: the condition itself may be that it
    died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc is not None and not exit_ok and not proc.alive():
            pytest.fail(f"stream exited while waiting for {what}:\n{proc.log_tail()}")
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout}s waiting for {what}:\n{proc.log_tail() if proc else ''}")
    return None


def no_batch_in_flight(checkpoint: str, s3: Any = None) -> bool:
    """The newest planned batch (``offsets/N``) is committed (``commits/N``). Why: after the last records
    Spark may run a no-data batch that emits the windows the watermark closed; a stop during it leaves
    those windows to the next start. ``s3``: the ``S3Config`` of a checkpoint in S3 (else the environment's)."""
    from rewind.storage import open_storage

    store = open_storage(checkpoint, s3)
    planned = [int(f) for f in store.list_dir("offsets")[1] if f.isdigit()]
    committed = [int(f) for f in store.list_dir("commits")[1] if f.isdigit()]
    return bool(planned) and max(planned) == max(committed, default=-1)


def assert_no_open_transaction(bootstrap: str, topics: list[str]) -> None:
    """read_committed and read_uncommitted end offsets agree: no killed transaction lingers open."""
    from rewind.kafka.lookups import KafkaOffsetClient

    base = {"bootstrap.servers": bootstrap, "group.id": "t"}
    with KafkaOffsetClient({**base, "isolation.level": "read_uncommitted"}) as raw, \
            KafkaOffsetClient({**base, "isolation.level": "read_committed"}) as committed:
        tps = raw.partitions(topics)
        assert raw.end_offsets(tps) == committed.end_offsets(tps), "a transaction was left open"
