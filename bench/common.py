"""What every benchmark script shares (the scripts run as files, so this dir is on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def keep_stdout_for_json(log: Path) -> IO[str]:
    """Send fd 1 and 2 (Spark's JVM, Airflow, services, children) to `log`; return a file on the
    real stdout, so the script's stdout holds only its JSON."""
    real = os.fdopen(os.dup(1), "w")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return real


def broker_description() -> str:
    """Which broker the embedded platform runs, from its jar's name (``kafka_2.13-4.1.1.jar``)."""
    from rewind.platform.jars import jars_dir

    jars = sorted((jars_dir() / "kafka").glob("kafka_2.13-*.jar"))
    version = jars[-1].stem.split("-", 1)[1] if jars else "?"
    return f"Apache Kafka {version} (KRaft), one embedded broker"
