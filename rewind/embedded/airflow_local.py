"""A local Airflow 3 (api-server, scheduler, dag-processor, triggerer) for `make up` and the tests.

Nothing here imports Airflow (its command line and REST API drive it), so the core library may import this.

How it is set up (Airflow 3.3, measured):
- ``AIRFLOW_HOME`` is a directory of its own with an ``airflow.cfg`` written here (mode 0600):
  SQLite metadata DB, LocalExecutor, no examples, the given DAG and plugin folders, short parsing
  intervals, the api-server, the task-log server and the triggerer-log server on free ports. Or,
  what most production Airflow runs (``executor="CeleryExecutor"``): a PostgreSQL metadata DB and
  a Redis broker, with the workers started apart (``celery_worker``), on other hosts if need be;
  the same DAGs and tasks run either way.
- Authentication is Airflow's Simple auth manager: ``[core] simple_auth_manager_users`` names the users
  and ``simple_auth_manager_passwords_file`` is a JSON ``{"user": "password"}`` file (mode 0600) this module
  writes first with passwords from :mod:`secrets` (Airflow only fills in missing users), kept across
  restarts and never in the repository. :meth:`LocalAirflow.client` hands out a REST client logged in.
- The four components, the api-server first, are ``ManagedProcess`` children (own session, parent-death
  signal, a log each under ``home/logs``), not ``airflow standalone``, whose children outlive it when killed.
- The embedded services (and this Airflow's own REST API, for the Asset watchers) are Airflow connections
  given as ``AIRFLOW_CONN_*`` variables (JSON), so no credential is stored in the metadata DB.
"""

from __future__ import annotations

import base64
import configparser
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path
from typing import Any

from rewind.embedded.airflow_connections import connections_env
from rewind.embedded.airflow_sqlite import component_env, database_settings
from rewind.embedded.services import PlatformInfo
from rewind.runtime.airflow_client import READ_TIMEOUT_S, AirflowApiError, AirflowClient, AirflowError
from rewind.runtime.processes import ManagedProcess, free_port, log_tail

log = logging.getLogger(__name__)

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")  # the others once the api-server answers
ADMIN_USER = "admin"
HEALTH_PARTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")  # healthy in /api/v2/monitor/health


def airflow_binary() -> str:
    """The ``airflow`` command of this interpreter's environment (the venv), else the one on PATH."""
    here = Path(sys.executable).parent / "airflow"
    if here.exists():
        return str(here)
    found = shutil.which("airflow")
    if not found:
        raise AirflowError("the 'airflow' command was not found: pip install -r requirements.txt")
    return found


class LocalAirflow:
    """Airflow 3 on this machine: prepare ``home``, migrate the DB, start the four components.

    ``env`` is added to every component's environment (and so to every task's): e.g. the
    platform's variables, ``REWIND_HOME``, ``PYTHONPATH``. ``platform`` adds the connections of
    :func:`connections_env`. New DAGs start paused unless ``paused_at_creation=False`` (a DAG's
    own ``is_paused_upon_creation`` wins); ``schedules=False`` turns off scheduled runs (triggered
    runs still run). ``stop()`` ends every process that was started, children included.
    """

    def __init__(self, home: Path, dags_folder: Path, plugins_folder: Path, env: dict[str, str] | None = None,
                 port: int | None = None, platform: PlatformInfo | None = None, username: str = ADMIN_USER,
                 parallelism: int = 4, paused_at_creation: bool = True, schedules: bool = True,
                 extra_users: dict[str, str] | None = None, executor: str = "LocalExecutor",
                 database_url: str | None = None, broker_url: str | None = None) -> None:
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.plugins_folder = Path(plugins_folder).resolve()
        self.extra_env = dict(env or {})
        if platform is not None:
            self.extra_env.update(connections_env(platform))
        self.port = port or free_port()
        self.username = username
        self.parallelism = parallelism
        self.paused_at_creation = paused_at_creation
        self.schedules = schedules
        #: More Simple-auth-manager users, ``{username: role}`` (role: viewer, user, op or admin), each
        #: with a generated password in the same 0600 file (e.g. a viewer for access-control tests).
        self.extra_users = dict(extra_users or {})
        bad = [f"{u}:{r}" for u, r in self.extra_users.items()
               if u == username or not u.isidentifier() or r not in ("viewer", "user", "op", "admin")]
        if bad:
            raise ValueError(f"extra_users {bad}: usernames are letters, digits and _ (not {username!r}), roles "
                             "one of viewer, user, op, admin")
        if executor == "CeleryExecutor" and not (database_url and broker_url):
            raise ValueError("the CeleryExecutor needs database_url (PostgreSQL) and broker_url (Redis)")
        self.executor, self.database_url, self.broker_url = executor, database_url, broker_url
        self.processes: dict[str, ManagedProcess] = {}
        self.timings: dict[str, float] = {}
        self._password: str | None = None
        self.password_generated = False  # this start made the admin password (print it once)

    # -- where things are ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json"

    @property
    def password(self) -> str:
        if self._password is None:
            self._password = json.loads(self.password_file.read_text())[self.username]
        return self._password

    @property
    def config_file(self) -> Path:
        return self.home / "airflow.cfg"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    def environment(self) -> dict[str, str]:
        """The variables every Airflow command for this home needs (components, CLI, tests)."""
        bin_dir = str(Path(airflow_binary()).parent)
        path = os.environ.get("PATH", "")
        return {
            **self.extra_env,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW_CONFIG": str(self.config_file),
            "PATH": bin_dir + (os.pathsep + path if path else ""),
            # Tasks run Spark: its Python workers must use this interpreter (see ENVIRONMENT.md).
            "PYSPARK_PYTHON": self.extra_env.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": self.extra_env.get("PYSPARK_DRIVER_PYTHON", sys.executable),
            "PYTHONUNBUFFERED": "1",
        }

    # -- preparing the home ------------------------------------------------------------------

    def _secrets(self) -> dict[str, str]:
        """Keys Airflow needs, generated once per home (the Fernet key encrypts DB fields)."""
        path = self.home / "secrets.json"
        if path.exists():
            return json.loads(path.read_text())
        values = {
            "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "jwt_secret": secrets.token_urlsafe(48),
            "api_secret_key": secrets.token_urlsafe(32),
        }
        _write_private(path, json.dumps(values))
        return values

    def _ensure_password(self) -> None:
        passwords: dict[str, str] = {}
        if self.password_file.exists():
            try:
                passwords = json.loads(self.password_file.read_text() or "{}")
            except json.JSONDecodeError:
                passwords = {}
        for user in (self.username, *self.extra_users):
            if not passwords.get(user):
                passwords[user] = secrets.token_urlsafe(18)
                self.password_generated |= user == self.username
        _write_private(self.password_file, json.dumps(passwords) + "\n")
        self._password = passwords[self.username]

    def write_config(self) -> None:
        keys = self._secrets()
        h = self.home
        cfg: dict[str, dict[str, str]] = {
            "core": {
                "dags_folder": str(self.dags_folder),
                "plugins_folder": str(self.plugins_folder),
                "executor": self.executor,
                "load_examples": "False",
                "parallelism": str(self.parallelism),
                "fernet_key": keys["fernet_key"],
                "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
                "simple_auth_manager_users": ",".join([f"{self.username}:admin",
                                                       *(f"{u}:{r}" for u, r in self.extra_users.items())]),
                "simple_auth_manager_all_admins": "False",
                "simple_auth_manager_passwords_file": str(self.password_file),
                "execution_api_server_url": f"{self.url}/execution/",
                "dags_are_paused_at_creation": str(self.paused_at_creation),
                "dagbag_import_timeout": "60",
            },
            "database": database_settings(self.database_url, h / "airflow.db"),
            "api": {
                "host": "127.0.0.1",
                "port": str(self.port),
                "base_url": self.url,
                "workers": "1",
                "secret_key": keys["api_secret_key"],
                "expose_config": "False",
            },
            "api_auth": {"jwt_secret": keys["jwt_secret"]},
            "logging": {
                "base_log_folder": str(self.log_dir / "tasks"),
                "worker_log_server_port": str(free_port()),
                "trigger_log_server_port": str(free_port()),
            },
            "scheduler": {
                "scheduler_heartbeat_sec": "2",
                "use_job_schedule": str(self.schedules),
                "job_heartbeat_sec": "2",
                "scheduler_idle_sleep_time": "0.5",
                "parsing_cleanup_interval": "30",
            },
            "triggerer": {"job_heartbeat_sec": "2", "capacity": "100"},
            # A task's calls to the execution API: 5 s (Airflow's default) timed out on 2 busy cores.
            "workers": {"execution_api_timeout": "30"},
            "dag_processor": {  # new files within 5 s; a known file again after Airflow's 30 s (5 s: a parse
                "refresh_interval": "5",  # every 3 s for `rewind up`, 94 in the browser test's 5 minutes)
                "min_file_process_interval": "30",
                "parsing_processes": "1",
                "dag_bundle_storage_path": str(h / "bundles"),
            },
        }
        if self.executor == "CeleryExecutor":
            assert self.database_url and self.broker_url
            cfg["celery"] = {"broker_url": self.broker_url, "worker_concurrency": "4",
                             "result_backend": "db+" + self.database_url,
                             "worker_enable_remote_control": "False"}
        parser = configparser.RawConfigParser()
        for section, values in cfg.items():
            parser[section] = values
        buf = StringIO()
        buf.write("# written by rewind.embedded.airflow_local at every start; edits are overwritten\n")
        parser.write(buf)
        _write_private(self.config_file, buf.getvalue())

    def prepare(self) -> None:
        """Folders, config, password file and ``airflow db migrate`` (idempotent)."""
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.plugins_folder.mkdir(parents=True, exist_ok=True)
        self._ensure_password()
        self.write_config()
        t0 = time.monotonic()
        migrate_log = self.log_dir / "db-migrate.log"
        with open(migrate_log, "ab") as out:
            result = subprocess.run([airflow_binary(), "db", "migrate"], stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.environment()}, timeout=600)
        self.timings["db_migrate_s"] = round(time.monotonic() - t0, 2)
        if result.returncode != 0:
            raise AirflowError(f"`airflow db migrate` failed (exit {result.returncode}); see {migrate_log}:\n"
                               + log_tail(migrate_log))

    # -- running -----------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> "LocalAirflow":
        """Prepare, start the components and wait until the API reports all of them healthy."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Prepare the home and start the components without waiting for them (see :meth:`wait_ready`).

        Call it from a thread that lives as long as Airflow should: Linux sends the parent-death
        signal when the starting thread ends.
        """
        self._t0 = time.monotonic()
        try:
            self.prepare()
            for name in COMPONENTS:
                self._start_component(name)
                if name == "api-server":  # the others work through its execution API: started together on 2
                    self._wait_healthy(180.0, parts=())  # busy cores, a task queued before it answered failed
        except BaseException:
            self.stop()
            raise

    def _start_component(self, name: str) -> None:
        argv = [airflow_binary(), name]
        if name == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        elif name in ("scheduler", "triggerer"):
            # Their log servers would listen on every interface; the api-server reads task logs
            # from the local files anyway, so they are not started.
            argv.append("--skip-serve-logs")
        # This Airflow's REST API and login, for the Asset watchers that read their own events back.
        api = {"conn_type": "http", "host": self.url, "login": self.username, "password": self.password}
        env = {**self.environment(), **component_env(name, self.database_url),
               "AIRFLOW_CONN_REWIND_AIRFLOW_API": json.dumps(api)}
        proc = ManagedProcess(f"airflow-{name}", argv, self.log_dir / f"{name}.log", env=env, cwd=self.home)
        proc.start()
        self.processes[name] = proc

    def restart_component(self, name: str, kill: bool = False) -> None:
        """Stop one component (SIGKILL with ``kill``, else gracefully) and start it again."""
        proc = self.processes[name]
        if kill and proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stop()
        self._start_component(name)

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the API answers, reports every component healthy and accepts the login."""
        t0 = getattr(self, "_t0", time.monotonic())
        try:
            self._wait_healthy(timeout - (time.monotonic() - t0))
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = round(time.monotonic() - t0, 2)
        log.info("Airflow ready at %s in %.1fs", self.url, self.timings["start_s"])

    def _wait_healthy(self, timeout: float, parts: tuple[str, ...] = HEALTH_PARTS) -> None:
        """Until the API answers, reports ``parts`` healthy and accepts the login; a component that exits ends it."""
        deadline = time.monotonic() + max(timeout, 1.0)
        last: Any = "no answer"
        with self.client() as client:
            while time.monotonic() < deadline:
                dead = self.dead_components()
                if dead:
                    proc = self.processes[dead[0]]
                    code = proc.proc.returncode if proc.proc else "?"
                    raise AirflowError(f"Airflow {dead[0]} exited during start-up (code {code}); "
                                       f"see {proc.log_path}:\n{log_tail(proc.log_path)}")
                try:
                    last = client.health()
                    if all((last.get(part) or {}).get("status") == "healthy" for part in parts):
                        client.token()  # the login works too
                        return
                except AirflowApiError as exc:
                    last = str(exc)
                time.sleep(0.5)
        logs = "\n".join(f"--- {p.log_path}\n{log_tail(p.log_path, 8)}" for p in self.processes.values())
        raise AirflowError(f"Airflow at {self.url} not healthy after {timeout:.0f}s; last health: {last}\n{logs}")

    def dead_components(self) -> list[str]:
        """Names of started components that have exited (empty while all run)."""
        return [name for name, p in self.processes.items() if not p.alive()]

    def alive(self) -> bool:
        return bool(self.processes) and all(p.alive() for p in self.processes.values())

    def pids(self) -> dict[str, int]:
        return {name: p.pid or 0 for name, p in self.processes.items()}

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every component's process group at once, SIGKILL what is left after ``grace``.

        The triggerer takes about 10 s (it gives its trigger runner that long); the others 1-4 s.
        """
        threads = [threading.Thread(target=p.stop, args=(grace,), daemon=True) for p in self.processes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(grace + 10)
        self.processes.clear()

    def celery_worker(self, name: str, home: Path, concurrency: int = 2) -> tuple[list[str], dict[str, str]]:
        """The command and environment of one Celery worker named ``name`` (``--celery-hostname``), with its
        own ``home`` for its task logs; start it wherever a worker should run (another host)."""
        argv = [airflow_binary(), "celery", "worker", "--concurrency", str(concurrency), "--skip-serve-logs",
                "--celery-hostname", f"{name}@%h", "--without-mingle", "--without-gossip", "--pid",
                str(home / "worker.pid")]
        # The config is this Airflow's (AIRFLOW_CONFIG); the home, the task logs and the pid file the worker's own.
        env = {**os.environ, **self.environment(), "AIRFLOW_HOME": str(home),
               "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs")}
        return argv, env

    def client(self, timeout: float = READ_TIMEOUT_S, user: str | None = None) -> "AirflowClient":
        """A REST client logged in as the admin, or as ``user`` (one of ``extra_users``)."""
        if user is not None and user != self.username:
            return AirflowClient(self.url, user, self.password_of(user), timeout=timeout)
        return AirflowClient(self.url, self.username, self._password or self.password, timeout=timeout)

    def password_of(self, user: str) -> str:
        """The generated password of ``user`` (the admin or one of ``extra_users``)."""
        return json.loads(self.password_file.read_text())[user]

    def login_text(self) -> str:
        return f"{self.url}  user {self.username}, password {self.password} (also in {self.password_file})"

    def __enter__(self) -> "LocalAirflow":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by the owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
