"""Where Rewind's environment is read: the home directory, the services, the bootstrap, the knobs.

Why one module: library code used to import the command line to learn ``REWIND_HOME`` or the
bootstrap, which tied every module to the CLI (an import cycle of 16 files). Every environment
variable Rewind reads is read here, with its default and what it is for:

| variable | default | what |
|---|---|---|
| ``REWIND_HOME`` | ``./.rewind`` | state of the embedded platform, streams' status, runs, reports |
| ``REWIND_REGISTRY`` | ``streams.yaml`` of the checkout | the stream registry |
| ``REWIND_KAFKA_BOOTSTRAP`` | the embedded platform's | Kafka for commands without ``--bootstrap`` |
| ``REWIND_JARS`` | ``.jars`` of the checkout | JVM dependencies (``pom.xml``) |
| ``REWIND_KAFKA_HEAP`` | 1g (512m per cluster node) | the embedded broker's heap |
| ``KAFKA_JVM_PERFORMANCE_OPTS`` | G1, 20 ms pauses | the embedded broker's JIT and GC options (as Kafka's scripts) |
| ``REWIND_SPARK_MASTER`` | ``local[2]`` | Spark master of sessions Rewind builds |
| ``REWIND_SPARK_LOG_LEVEL`` | ``WARN`` | Spark's log level |
| ``REWIND_LAG_PROBE_S`` | 10 | seconds between the driver's lag look-ups, which check real-time slots too (0: off) |
| ``REWIND_FAULTS`` | unset | tests only: the fault points armed in a process (``rewind.faults``; read there) |
| ``REWIND_METRICS_TOKEN`` | unset | a scraper's bearer token for ``/rewind/metrics`` (else an Airflow login) |
| ``REWIND_DRIVER_WAIT_S`` | 60 | how long a driver waits for another's lease to lapse before it is refused |
| ``REWIND_LEASE_TTL_S`` | 20 | a driver lease's life: how long a dead driver elsewhere blocks a successor |
| ``REWIND_JVM_CACHE`` | ``~/.cache/rewind/jvm`` | where Rewind's JVM classes are compiled (``platform.jvm``) |
| ``REWIND_CLASS_SHARING`` | on | ``off``: drivers ignore the class-data archive (``runtime.class_sharing``) |
| ``REWIND_LINEAGE_INTERVAL_S`` | 60 | seconds between a driver's OpenLineage RUNNING events (``lineage``) |

OpenLineage's own variables (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, ``OPENLINEAGE__TRANSPORT__*``...)
are the client's: ``rewind.lineage.config`` only asks whether one configures a transport.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rewind.errors import Refused

PACKAGE_DIR = Path(__file__).resolve().parent
#: The checkout Rewind runs from (``pyproject.toml`` beside the package), or None when installed.
SOURCE_ROOT: Path | None = PACKAGE_DIR.parent if (PACKAGE_DIR.parent / "pyproject.toml").exists() else None


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def rewind_home() -> Path:
    return Path(os.environ.get("REWIND_HOME") or Path.cwd() / ".rewind").resolve()


def services_dir() -> Path:
    return rewind_home() / "services"


def default_registry() -> Path:
    """``$REWIND_REGISTRY``, else the checkout's ``streams.yaml``."""
    given = os.environ.get("REWIND_REGISTRY")
    if given:
        return Path(given)
    if SOURCE_ROOT is None:
        raise Refused("no stream registry: set REWIND_REGISTRY to your streams.yaml (or pass --registry)")
    return SOURCE_ROOT / "streams.yaml"


def jars_dir() -> Path:
    given = os.environ.get("REWIND_JARS")
    if given:
        return Path(given).resolve()
    return (SOURCE_ROOT or Path.cwd()) / ".jars"


def python_path() -> str:
    """What child processes need on ``PYTHONPATH`` to import this ``rewind`` (the checkout, if any)."""
    parts = [str(SOURCE_ROOT)] if SOURCE_ROOT else []
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(dict.fromkeys(parts))


def resolve_bootstrap(arg: str | None) -> str:
    """``--bootstrap``, else ``$REWIND_KAFKA_BOOTSTRAP`` (the command line sets it from a running embedded
    platform when it starts: ``rewind.embedded.services.export_platform_env``)."""
    if arg:
        return arg
    if os.environ.get("REWIND_KAFKA_BOOTSTRAP"):
        return os.environ["REWIND_KAFKA_BOOTSTRAP"]
    raise Refused("no Kafka to talk to: pass --bootstrap HOST:PORT, set REWIND_KAFKA_BOOTSTRAP, or start the "
                  "embedded platform with `rewind services up` (or `make up`)")


def spark_master(default: str = "local[2]") -> str:
    return os.environ.get("REWIND_SPARK_MASTER") or default


def spark_log_level() -> str:
    return os.environ.get("REWIND_SPARK_LOG_LEVEL", "WARN")


def lag_probe_interval_s() -> float:
    return float(os.environ.get("REWIND_LAG_PROBE_S", "10"))


def lineage_interval_s() -> float:
    """Seconds between a driver's OpenLineage RUNNING events (at least 1)."""
    return max(1.0, float(os.environ.get("REWIND_LINEAGE_INTERVAL_S", "60")))


def driver_lock_wait_s() -> float:
    """How long a driver waits for another driver of its stream to end before it is refused."""
    return float(os.environ.get("REWIND_DRIVER_WAIT_S", "60"))


def metrics_token() -> str | None:
    """The bearer token that opens ``/rewind/metrics`` to a scraper without an Airflow login (unset: none)."""
    return os.environ.get("REWIND_METRICS_TOKEN") or None


def lease_ttl_s() -> float:
    """A driver lease's time to live (``rewind.control.lease``); renewed every quarter of it."""
    return float(os.environ.get("REWIND_LEASE_TTL_S", "20"))


def class_sharing_enabled() -> bool:
    """Whether drivers Rewind starts map the class-data archive when there is one (``runtime.class_sharing``)."""
    return os.environ.get("REWIND_CLASS_SHARING", "on").strip().lower() not in ("off", "0", "false", "no")


def native_libs_enabled() -> bool:
    """Whether drivers Rewind starts load Spark's native libraries from one folder (``runtime.native_libs``)."""
    return os.environ.get("REWIND_NATIVE_LIBS", "on").strip().lower() not in ("off", "0", "false", "no")


def jvm_cache_dir() -> Path:
    given = os.environ.get("REWIND_JVM_CACHE")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rewind" / "jvm"


def kafka_heap(cluster: bool) -> str:
    return os.environ.get("REWIND_KAFKA_HEAP") or ("512m" if cluster else "1g")


def kafka_jvm_performance_opts() -> list[str]:
    """The embedded broker's JIT and GC options: ``KAFKA_JVM_PERFORMANCE_OPTS`` replaces the default, as in
    Kafka's ``kafka-run-class.sh`` (the tests give short-lived brokers C1 only and the serial collector)."""
    return (os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS") or "-XX:+UseG1GC -XX:MaxGCPauseMillis=20").split()


_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^{}]*))?\}")  # innermost first


def interpolate_env(value: Any, env: dict[str, str]) -> Any:
    """``${VAR}`` and ``${VAR:-default}`` in every string of ``value`` (a YAML tree), from ``env``."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(1) in env:
                return env[m.group(1)]
            if m.group(2) is not None:
                return m.group(2)
            raise Refused(f"environment variable {m.group(1)} is not set and has no default")
        previous = None
        while previous != value:  # nested defaults: ${A:-x/${B}} expands B, then A
            previous, value = value, _ENV_RE.sub(sub, value)
        return value
    if isinstance(value, dict):
        return {k: interpolate_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate_env(v, env) for v in value]
    return value
