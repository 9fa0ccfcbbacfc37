"""Embedded services for real: start, survive a broker restart, stop with nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import EmbeddedPlatform, read_platform
from rewind.proof.verify import read_records
from rewind.runtime.processes import pid_alive

ROOT = Path(__file__).resolve().parents[1]


def test_platform_lifecycle_and_broker_restart(tmp_path: Path) -> None:
    plat = EmbeddedPlatform(tmp_path / "svc")
    info = plat.start()
    pids = list(info.pids.values())
    try:
        assert all(pid_alive(p) for p in pids)
        assert read_platform(tmp_path / "svc") == info
        produce(info.kafka_bootstrap, ProduceSpec(topic="restart-me", count=300, partitions=2))
        assert plat.kafka is not None
        plat.kafka.restart()  # a controlled shutdown and a start on the same ports and data
        records = read_records(info.kafka_bootstrap, ["restart-me"])
        assert len(records) == 300
        assert sorted({r.partition for r in records}) == [0, 1]
    finally:
        plat.stop()
    new_pids = [plat.s3.process.pid, plat.kafka.process.pid]  # type: ignore[union-attr]
    assert not any(pid_alive(p) for p in pids + new_pids), "a service outlived stop()"
    assert read_platform(tmp_path / "svc") is None


def test_failed_start_names_the_cause_and_log(tmp_path: Path) -> None:
    """A taken port: one error naming the cause and the broker's log; S3 is not left running."""
    import socket

    import pytest

    from rewind.runtime.processes import ServiceError

    plat = EmbeddedPlatform(tmp_path / "svc")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", plat.kafka.port))
        squatter.listen()
        with pytest.raises(ServiceError, match=f"port {plat.kafka.port} is taken"):
            plat.start()
    assert plat.s3.process is not None and not plat.s3.process.alive(), "S3 left running after a failed start"


def test_broker_log_names_the_cause(tmp_path: Path) -> None:
    """Too large a heap: the JVM refuses, and the error says which setting to change and where the log is."""
    import pytest

    from rewind.embedded.kafka_broker import KafkaBroker
    from rewind.runtime.processes import ServiceError

    broker = KafkaBroker(tmp_path / "k", heap="100000g")
    try:
        with pytest.raises(ServiceError, match=r"REWIND_KAFKA_HEAP.*see .*broker\.log"):
            broker.start(timeout=60)
    finally:
        broker.stop()


def test_cli_services_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "REWIND_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}

    def rewind(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rewind.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    up = rewind("services", "up")
    assert up.returncode == 0, up.stderr
    info = read_platform(tmp_path / "services")
    assert info is not None
    try:
        status = rewind("services", "status")
        assert status.returncode == 0 and json.loads(status.stdout)["alive"] == {"seaweedfs": True, "kafka": True}
    finally:
        down = rewind("services", "down")
    assert down.returncode == 0 and "kafka" in down.stdout
    assert not any(pid_alive(p) for p in info.pids.values())
    assert rewind("services", "status").returncode == 1


def test_services_die_with_their_owner(tmp_path: Path) -> None:
    """kill -9 of the process that started the platform leaves no service behind."""
    import signal
    import time

    script = tmp_path / "owner.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\n"
        "from rewind.embedded.services import EmbeddedPlatform\n"
        f"info = EmbeddedPlatform(Path({str(tmp_path / 'svc')!r})).start()\n"
        "print(' '.join(str(p) for p in info.pids.values()), flush=True)\n"
        "time.sleep(120)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(pid_alive(p) for p in pids), "a service outlived its owner"
