"""Airflow as platform teams run it, on one machine: the CeleryExecutor, and workers on other "hosts".

The control node (api-server, scheduler, dag-processor, triggerer) runs here with a PostgreSQL
metadata database (``tests.harness.pg``) and a Redis broker (Debian's ``redis-server`` on a free
port, no persistence); each Celery worker runs on a ``tests.harness.hosts.Host`` of its own (own
PID, mount and UTS namespaces, a private home), so a task sees neither another worker's processes
nor its files. The DAGs, the tasks and the stream jobs are the ones ``make up`` runs with the
LocalExecutor. ``stop`` ends everything it started.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rewind.embedded.airflow_local import LocalAirflow
from rewind.runtime.processes import ManagedProcess, ServiceError, free_port, port_open, wait_until
from tests.harness.hosts import Host, HostProcess

__all__ = ["CeleryAirflow", "RedisServer", "redis_available"]


def redis_available() -> bool:
    return shutil.which("redis-server") is not None


class RedisServer:
    """``redis-server`` on a free loopback port, nothing written to disk."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceError("redis-server was not found: apt-get install -y redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess("redis", [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                                "--appendonly", "no", "--dir", str(self.workdir)],
                                      self.workdir / "redis.log")
        self.process.start()
        wait_until(lambda: port_open(self.port), timeout, "Redis", self.workdir / "redis.log")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5)


class CeleryAirflow:
    """The control node here, ``workers`` (name -> Host) elsewhere (see the module docstring)."""

    def __init__(self, workdir: Path, env: dict[str, str], platform: Any, workers: dict[str, Host],
                 dags: Path, plugins: Path, worker_env: dict[str, dict[str, str]] | None = None) -> None:
        self.workdir = workdir
        self.env, self.platform, self.hosts = env, platform, workers
        self.worker_env = worker_env or {}  # per worker, e.g. its own REWIND_HOME
        self.dags, self.plugins = dags, plugins
        self.redis = RedisServer(workdir / "redis")
        self.postgres: Any = None
        self.airflow: LocalAirflow | None = None
        self.workers: dict[str, HostProcess] = {}
        self.worker_homes: dict[str, Path] = {}

    def start(self, timeout: float = 300.0) -> CeleryAirflow:
        from tests.harness.pg import LocalPostgres

        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.postgres = LocalPostgres(database="airflow")  # under /tmp: its server user must reach it
            database = self.postgres.start()
            self.redis.start()
            # A task whose worker was lost is failed after a minute without heartbeats (Airflow: 5 min).
            env = {**self.env, "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60"}
            self.airflow = LocalAirflow(self.workdir / "airflow", self.dags, self.plugins, env=env,
                                        platform=self.platform, paused_at_creation=False, schedules=False,
                                        executor="CeleryExecutor", database_url=database, broker_url=self.redis.url)
            self.airflow.start(timeout=timeout)
            for name in self.hosts:
                self.start_worker(name)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, name: str, home: Path | None = None, timeout: float = 120.0) -> HostProcess:
        """Start (again) the Celery worker of host ``name``. Its home (pid file, task logs) is a directory of
        its own here, so a test can read the task logs of a worker it killed; what the tasks write as
        Rewind (``REWIND_HOME``, ``worker_env``) stays on the worker's host."""
        assert self.airflow is not None
        host = self.hosts[name]
        home = home or self.worker_homes.get(name) or (self.workdir / "workers" / name)
        self.worker_homes[name] = home
        argv, env = self.airflow.celery_worker(name, home)
        env.update(self.worker_env.get(name, {}))
        log = self.workdir / "workers" / f"{name}.log"
        seen = log.read_text(errors="replace").count(" ready.") if log.exists() else 0
        proc = host.spawn(["sh", "-c", 'mkdir -p "$0" && exec "$@"', str(home), *argv], env, log)
        deadline = time.monotonic() + timeout
        while proc.text().count(" ready.") <= seen:  # celery's "celery@NAME ready." line
            if not proc.alive() or time.monotonic() > deadline:
                raise ServiceError(f"the Celery worker on {name} did not start; see {log}:\n{proc.text()[-3000:]}")
            time.sleep(0.3)
        self.workers[name] = proc
        return proc

    def task_log(self, name: str, dag_id: str, run_id: str, task_id: str) -> str:
        """The log of a task that ran on worker ``name`` (its last attempt), or ''."""
        folder = self.worker_homes[name] / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        attempts = sorted(folder.glob("attempt=*.log")) if folder.is_dir() else []
        return attempts[-1].read_text(errors="replace") if attempts else ""

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker's processes (what a lost worker looks like); the rest of its host stays."""
        self.workers.pop(name).kill()

    def stop(self) -> None:
        for proc in self.workers.values():
            proc.kill()
        self.workers.clear()
        if self.airflow is not None:
            self.airflow.stop()
        self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
