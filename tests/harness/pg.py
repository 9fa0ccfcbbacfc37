"""A throwaway PostgreSQL server for tests, `make up` and CI.

Why this exists: the sink must be proven on PostgreSQL, not only on SQLite, and
no PostgreSQL runs here by default. `LocalPostgres` starts a private server
from the distribution's binaries (`tests.harness.pg_install` finds them, and
the OS user to run them as) in a temp dir on a free 127.0.0.1 port, and stops it
without leaving a process.

How it runs, and why:
- The server is a *direct child* of this Python process (``postgres -D ...``,
  not ``pg_ctl start``, which would daemonize it), so we know its pid, can reap
  it, and can SIGKILL it and its children if a polite stop fails.
- Stop is ``pg_ctl stop -m immediate`` (no checkpoint, the data is throwaway),
  then SIGKILL to whatever is left, then the temp dir is removed. An
  ``atexit`` hook and (on Linux) a parent-death signal stop the server even if
  the owner forgets or is killed. Caveat: Linux sends that signal when the
  *thread* that started the server exits, so start it from a long-lived thread
  (the main thread, as pytest fixtures and the CLI do).
- Authentication: ``trust`` on the unix socket (private to the temp dir),
  ``scram-sha-256`` with a random password on TCP, so URLs carry a real
  password (and code that prints URLs must mask it). Databases on it:
  `tests.harness.pg_databases`.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy.engine import URL, make_url

from rewind.runtime.processes import free_port, parent_death_signal
from tests.harness.pg_databases import check_db_name, create_database
from tests.harness.pg_install import SERVER_OS_USER, PostgresError, check_traversable, find_pg_bin, server_user

log = logging.getLogger(__name__)

__all__ = ["LocalPostgres"]


class LocalPostgres:
    """One private PostgreSQL server: ``start()`` returns a SQLAlchemy URL, ``stop()`` leaves nothing.

    Use as a context manager or call start/stop; ``stop`` is idempotent and also
    runs at interpreter exit. `durable=False` (the default) turns fsync off:
    the server is throwaway, and tests and benchmarks should not pay for disk
    flushes of data nobody keeps.
    """

    def __init__(
        self,
        *,
        database: str = "rewind",
        parent_dir: str | os.PathLike[str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        durable: bool = False,
        start_timeout: float = 60.0,
        keep_dir: bool = False,
    ) -> None:
        check_db_name(database)
        self.database = database
        self.parent_dir = Path(parent_dir) if parent_dir else Path(tempfile.gettempdir())
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.durable = durable
        self.start_timeout = start_timeout
        self.keep_dir = keep_dir
        self.superuser = "postgres"
        self.password = secrets.token_urlsafe(18)
        self.port: int | None = None
        self.root: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids: tuple[int, int] | None = None
        self._url: str | None = None
        self._atexit_registered = False

    # -- paths -----------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        """URL of the database created at start (with password: pass it to create_engine, never print it)."""
        if self._url is None:
            raise PostgresError("LocalPostgres is not started")
        return self._url

    @property
    def admin_url(self) -> str:
        """URL of the maintenance database `postgres`, for CREATE/DROP DATABASE."""
        return make_url(self.url).set(database="postgres").render_as_string(hide_password=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> str:
        """initdb, start on a free port (retrying if another process grabs it), create the database."""
        if self.running():
            return self.url
        bin_dir = self.bin_dir or find_pg_bin()
        self._ids = server_user()
        check_traversable(self.parent_dir, self._ids)
        self.root = Path(tempfile.mkdtemp(prefix="rewind-pg-", dir=self.parent_dir))
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            if self._ids is not None:
                os.chown(self.root, *self._ids)
            os.chmod(self.root, 0o700)
            self._initdb(bin_dir)
            for attempt in range(3):
                self.port = free_port()
                if self._launch(bin_dir):
                    break
                if "could not bind" not in self._log_tail() or attempt == 2:
                    raise PostgresError(f"PostgreSQL failed to start (dir {self.root} kept); "
                                        f"log {self.log_path}:\n{self._log_tail()}")
                log.info("port %s was taken, retrying on another port", self.port)
            url = URL.create("postgresql+psycopg2", username=self.superuser, password=self.password,
                             host="127.0.0.1", port=self.port, database="postgres")
            self._url = url.render_as_string(hide_password=False)
            self._url = create_database(self._url, self.database)
        except BaseException:
            keep, self.keep_dir = self.keep_dir, True  # keep the log the error points at
            try:
                self.stop()
            finally:
                self.keep_dir, self.root = keep, None
            raise
        log.info("PostgreSQL started: pid %s, port %s, dir %s", self.pid, self.port, self.root)
        return self._url

    def create_database(self, name: str) -> str:
        """A fresh database on this server; returns its URL."""
        return create_database(self.admin_url, name)

    def stop(self) -> None:
        """``pg_ctl stop -m immediate``; if that fails, the same by signal, then SIGKILL; reap; remove the temp dir.

        The postmaster reaps its own children when it shuts down, so the polite paths
        leave no zombie; SIGKILL is the last resort for a server that ignores both.
        """
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    bin_dir = self.bin_dir or find_pg_bin()
                    res = self._run([str(bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate",
                                     "-w", "-t", "10"], timeout=20, check=False)
                    if res.returncode != 0:
                        log.warning("pg_ctl stop failed: %s", (res.stderr or res.stdout).strip())
                except (PostgresError, subprocess.TimeoutExpired, OSError) as e:
                    log.warning("pg_ctl stop failed (%s)", e)
                if proc.poll() is None:
                    _signal(proc.pid, signal.SIGQUIT)  # what pg_ctl -m immediate sends
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                # Last resort. Backends call setsid() and lead their own process groups, so
                # killpg would miss them: find them by parent pid. Kill them first and give
                # the postmaster a moment to reap them, so no zombie is left to init.
                log.warning("PostgreSQL pid %s ignored shutdown; killing it", proc.pid)
                children = _children_of(proc.pid)
                for pid in children:
                    _signal(pid, signal.SIGKILL)
                time.sleep(0.5)
                _signal(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log.error("PostgreSQL pid %s did not exit after SIGKILL", proc.pid)
                _wait_gone(children, timeout=10)
        if self.root is not None and not self.keep_dir:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self._url = None

    def __enter__(self) -> "LocalPostgres":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = make_url(self._url).render_as_string(hide_password=True) if self._url else "stopped"
        return f"LocalPostgres({where})"

    # -- internals ---------------------------------------------------------------
    def _run(self, cmd: list[str], *, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL tool as the server user (setuid in the child when we are root)."""
        kwargs: dict[str, Any] = {}
        if self._ids is not None:
            kwargs.update(user=self._ids[0], group=self._ids[1], extra_groups=[])
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root,
                             env=self._env(), **kwargs)
        if check and res.returncode != 0:
            raise PostgresError(f"{Path(cmd[0]).name} failed (exit {res.returncode}): "
                                f"{res.stderr.strip() or res.stdout.strip()}")
        return res

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8")
        if self._ids is not None:
            env["HOME"] = str(self.root)
            env["USER"] = env["LOGNAME"] = SERVER_OS_USER
        return env

    def _initdb(self, bin_dir: Path) -> None:
        assert self.root is not None
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._ids is not None:
            os.chown(pwfile, *self._ids)
        os.chmod(pwfile, 0o600)
        try:
            self._run([str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", self.superuser,
                       f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
                       "--encoding=UTF8", "--locale=C", "--no-instructions"], timeout=120)
        finally:
            pwfile.unlink(missing_ok=True)

    def _launch(self, bin_dir: Path) -> bool:
        """Start postgres as our child; True once it accepts connections, False if it exited."""
        assert self.root is not None and self.port is not None
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "max_connections": "100",
            "shared_buffers": "64MB",
            "logging_collector": "off",
        }
        if not self.durable:
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        cmd = [str(bin_dir / "postgres"), "-D", str(self.data_dir)]
        for k, v in settings.items():
            cmd += ["-c", f"{k}={v}"]
        kwargs: dict[str, Any] = {}
        if self._ids is not None:
            kwargs.update(user=self._ids[0], group=self._ids[1], extra_groups=[])
        preexec = parent_death_signal(signal.SIGQUIT)  # SIGQUIT = immediate shutdown of all backends
        with open(self.log_path, "ab") as logf:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                          cwd=self.root, env=self._env(), start_new_session=True,
                                          preexec_fn=preexec, **kwargs)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            if self._ready():
                return True
            time.sleep(0.1)
        raise PostgresError(f"PostgreSQL did not accept connections within {self.start_timeout:.0f}s; "
                            f"log {self.log_path}:\n{self._log_tail()}")

    def _ready(self) -> bool:
        """Accepting connections? Checked with a real login, which also proves the password."""
        import psycopg2

        try:
            psycopg2.connect(host="127.0.0.1", port=self.port, user=self.superuser, password=self.password,
                             dbname="postgres", connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _children_of(ppid: int) -> list[int]:
    """Pids whose parent is `ppid`."""
    try:
        return [c.pid for c in psutil.Process(ppid).children()]
    except psutil.NoSuchProcess:
        return []


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Wait until none of `pids` runs (a zombie counts as gone: it holds no resources)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        if alive:
            time.sleep(0.05)
    if alive:
        log.error("PostgreSQL processes %s still alive after %ss", alive, timeout)
