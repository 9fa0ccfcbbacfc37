"""A real Spark standalone cluster from the pyspark installation: one master, N workers, no Docker.

Why: ``local[N]`` runs the driver and its tasks in one JVM, so it cannot show what a cluster does
when an executor dies (the task re-runs on another executor, the worker launches a new one) or
when executors write stream state to a shared store (``s3a://``) that the driver reads back.

How: the master and each worker are ``java -cp <pyspark>/jars/* org.apache.spark.deploy...``
processes (no ``spark-class``: the pid we hold is the JVM itself), each in its own session, bound
to 127.0.0.1 on free ports, logging into a temp dir (``<dir>/master.log``, ``<dir>/worker-N.log``,
executors' stdout/stderr under ``<dir>/work-N/<app>/<executor id>/``). A worker launches executors
(``CoarseGrainedExecutorBackend``) as its own children: they share its process group, so stopping
a worker's group stops its executors. Workers get ``SPARK_HOME`` = the pyspark package (they build
the executor command from its ``jars/``), ``PYSPARK_PYTHON`` = this interpreter and ``PYTHONPATH``
with this checkout, which the executors' Python workers inherit.

Drivers connect in *client* deploy mode only: Spark standalone refuses cluster deploy mode for
Python applications (``spark-submit --master spark://... --deploy-mode cluster app.py`` exits
with "Error: Cluster deploy mode is currently not supported for python applications on
standalone clusters.").

Start-up measured on the 2-core machine (2026-11-24): master up and both workers registered in
7 s on an idle machine, 8-13 s beside the test platform (Kafka, SeaweedFS); a session on it
(driver up, two executors registered) takes 11 s more, 19 s with the 650 MB S3A jars on the
classpath. tests/test_spark_cluster.py: 6.5 min for the module (two crash runs, 2-3.5 min each).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from rewind.runtime.jars import java_binary
from rewind.runtime.processes import ManagedProcess, ServiceError, free_port, pid_alive, wait_until
from rewind.settings import python_path

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    """The pyspark package: it holds ``jars/`` and ``bin/`` as a Spark distribution does."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def scala_version() -> str:
    """``2.13`` from pyspark's ``jars/spark-core_2.13-*.jar``."""
    for jar in (spark_home() / "jars").glob("spark-core_*.jar"):
        return jar.name.split("_", 1)[1].split("-", 1)[0]
    raise ServiceError(f"no spark-core jar in {spark_home() / 'jars'}: the pyspark installation is broken "
                       "(reinstall it: pip install -r requirements.txt)")


@dataclass(frozen=True)
class Executor:
    pid: int
    executor_id: str
    app_id: str
    worker: int  # index of the worker that launched it
    stderr: Path  # its log (INFO: "Running task ...", "Finished task ...")


class StandaloneCluster:
    """``with StandaloneCluster(tmp) as c: build_session(..., master=c.master_url)``."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 daemon_heap: str = "256m") -> None:
        self.workdir = Path(workdir).resolve()
        self.n_workers, self.cores, self.memory, self.daemon_heap = workers, cores, memory, daemon_heap
        self.port, self.ui_port = free_port(), free_port()
        self.master: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.startup_s: float | None = None

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def env(self) -> dict[str, str]:
        """Environment of the master and the workers (and so of the executors and their Python workers)."""
        conf_dir = self.workdir / "conf"  # empty: no spark-defaults.conf from elsewhere leaks in
        conf_dir.mkdir(parents=True, exist_ok=True)
        # SPARK_SCALA_VERSION: the launcher that builds the executor command asks for it (else "Cannot find any
        # build directories": it looks for a source build); load-spark-env.sh sets it for bin/ scripts.
        return {"SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_SCALA_VERSION": scala_version(),
                "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": python_path(), "SPARK_NO_DAEMONIZE": "1"}

    def _java(self, main_class: str, *args: str) -> list[str]:
        return [java_binary(), f"-Xmx{self.daemon_heap}", "-cp", str(spark_home() / "jars" / "*"), main_class, *args]

    def start(self, timeout: float = 90.0) -> "StandaloneCluster":
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.master = ManagedProcess("spark-master", self._java(
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(self.ui_port)), self.workdir / "master.log", env=self.env())
        try:
            self.master.start()
            wait_until(lambda: self.state().get("status") == "ALIVE", timeout, "Spark master",
                       self.master.log_path, self.master.alive)
            for i in range(self.n_workers):
                work = self.workdir / f"work-{i}"
                work.mkdir(exist_ok=True)
                worker = ManagedProcess(f"spark-worker-{i}", self._java(
                    "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(work), self.master_url), self.workdir / f"worker-{i}.log", env=self.env())
                worker.start()
                self.workers.append(worker)
            wait_until(lambda: self.alive_workers() == self.n_workers, timeout,
                       f"{self.n_workers} Spark workers registered at {self.master_url}", self.master.log_path,
                       lambda: all(w.alive() for w in [self.master, *self.workers] if w))
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's ``/json``): workers, cores, running applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json", timeout=5) as resp:
            return dict(json.load(resp))

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def executor_jvms(self) -> list[Executor]:
        """Every executor JVM (``CoarseGrainedExecutorBackend``) running under our workers."""
        found: list[Executor] = []
        for i, w in enumerate(self.workers):
            if not w.alive():
                continue
            try:
                children = psutil.Process(w.pid).children()
            except psutil.NoSuchProcess:
                continue
            for child in children:
                try:
                    argv = child.cmdline()
                except psutil.Error:
                    continue
                if EXECUTOR_CLASS in argv and "--executor-id" in argv and "--app-id" in argv:
                    eid, app = argv[argv.index("--executor-id") + 1], argv[argv.index("--app-id") + 1]
                    found.append(Executor(child.pid, eid, app, i, self.workdir / f"work-{i}" / app / eid / "stderr"))
        return sorted(found, key=lambda e: e.pid)

    def executors(self) -> dict[int, str]:
        """pid -> executor id of every executor JVM under our workers."""
        return {e.pid: e.executor_id for e in self.executor_jvms()}

    def executor_pids(self) -> list[int]:
        return sorted(self.executors())

    def wait_for_executors(self, count: int, timeout: float = 60.0, exclude: set[int] | None = None) -> dict[int, str]:
        """Wait until ``count`` executor JVMs run (not counting the pids in ``exclude``)."""
        exclude = exclude or set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = {p: e for p, e in self.executors().items() if p not in exclude and pid_alive(p)}
            if len(live) >= count:
                return live
            time.sleep(0.3)
        raise ServiceError(f"{count} executor(s) not running after {timeout:.0f}s under the workers of "
                           f"{self.master_url}; see {self.workdir}/worker-*.log and {self.workdir}/work-*/")

    def executor_logs(self) -> list[Path]:
        """Every executor's stderr (``work-N/<app id>/<executor id>/stderr``)."""
        return sorted(self.workdir.glob("work-*/*/*/stderr"))

    def stop(self) -> None:
        """Workers (with their executors) first, then the master; SIGKILL after a short grace."""
        left = self.executor_pids()
        for w in self.workers:
            w.stop(grace=5.0)
        if self.master:
            self.master.stop(grace=5.0)
        for pid in left:  # in the workers' groups, so already gone; SIGKILL in case one left it: no orphans
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "StandaloneCluster":
        return self.start() if self.master is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
