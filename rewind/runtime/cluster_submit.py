"""What a spark-submit of a stream in YARN's cluster deploy mode carries, decided here, submitted elsewhere
(the Airflow hook passes it to the Spark provider's public ``SparkSubmitHook``).

Why each part:

- **the code goes with the application**: the driver runs in a YARN container, on a node that has Python and
  pyspark (the deployment's image or bootstrap) but not Rewind or the stream's code. One archive
  (``--archives rewind-job-<hash>.zip#rewind_job``) holds the ``rewind`` package and the stream's transform
  package, extracted in every container and put first on ``PYTHONPATH`` (driver and executors), so a node's
  own copy, if any, never shadows what was submitted. An archive, not ``--py-files``: it is extracted, so a
  package's data files are files. It is built once per content (its name is the hash of what it holds).
- **the registry goes too** (``--files``): the driver reads the stream's entry from its own copy;
- **restarts are Rewind's decision**: ``spark.yarn.maxAppAttempts=1``. YARN re-attempting a driver would
  be a restart the supervisor did not decide, did not count against the restart strategy and could not tell
  from the first attempt;
- **spark-submit returns once YARN accepted the application** (``spark.yarn.submit.waitAppCompletion=false``):
  a stream never finishes, and the Airflow worker must not hold a JVM for it;
- **the application is found by tag** (``spark.yarn.tags``: ``rewind-stream-<name>``), from any host, also
  when the process that submitted it is gone (``rewind.runtime.yarn_rm``);
- **no secret on a command line**: S3's keys reach the driver's environment through a properties file
  (mode 0600, ``--properties-file``), which spark-submit reads and ships to the ApplicationMaster with the
  rest of the application's conf; the command line (``ps``) holds only the endpoint.

What the cluster provides stays the deployment's (``spark-defaults.conf`` in ``SPARK_CONF_DIR``):
``spark.yarn.jars`` or ``spark.yarn.archive``, ``spark.pyspark.python``, memory and executors, the staging
directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import rewind
from rewind.errors import Refused
from rewind.runtime.yarn_rm import stream_tag

#: The archive's alias: the folder it is extracted into in every container.
ALIAS = "rewind_job"
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same code makes the same archive, byte for byte


class NotShippable(Refused, ValueError):
    """The stream's code cannot be packed for the cluster; the message says what was not found."""


@dataclass(frozen=True)
class ClusterSubmit:
    """The parts of one spark-submit: ``conf`` and the paths go on the command line, ``secret_conf`` into the
    0600 properties file."""

    application_args: list[str]
    conf: dict[str, str]
    archives: str
    files: str
    name: str
    secret_conf: dict[str, str] = field(default_factory=dict, repr=False)


def code_roots(transform: str) -> list[Path]:
    """The folders or files to ship: the ``rewind`` package, and the top-level package (or module) of the
    stream's transform when it is not Rewind's own."""

    roots = [Path(rewind.__file__).resolve().parent]
    top = transform.split(":", 1)[0].split(".", 1)[0]
    if top == "rewind":
        return roots
    found = importlib.util.find_spec(top)
    if found is None or found.origin is None and not found.submodule_search_locations:
        raise NotShippable(f"transform {transform!r}: its package {top!r} is not importable here, so it cannot be "
                           "shipped to the cluster (install it, or put it on PYTHONPATH)")
    if found.submodule_search_locations:
        roots.append(Path(next(iter(found.submodule_search_locations))).resolve())
    else:
        roots.append(Path(str(found.origin)).resolve())
    return roots


def _files(roots: list[Path]) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for root in roots:
        if root.is_file():
            out.append((root.name, root))
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
                out.append((f"{root.name}/{path.relative_to(root).as_posix()}", path))
    return out


def job_archive(transform: str | Sequence[str], cache_dir: Path) -> Path:
    """The zip of the code a stream's driver and executors import (``transform``: one entry point, or several:
    an upgrade's pre-flight runs the old version's and the new one's), in ``cache_dir`` under its content's
    hash (built when absent; written to a temporary name and renamed, so concurrent submits never ship half)."""
    roots = list(dict.fromkeys(r for t in ([transform] if isinstance(transform, str) else transform)
                               for r in code_roots(t)))
    entries = _files(roots)
    digest = hashlib.sha256()
    for name, path in entries:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    target = Path(cache_dir) / f"rewind-job-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in entries:
            zf.writestr(zipfile.ZipInfo(name, _ZIP_DATE), path.read_bytes(), zipfile.ZIP_DEFLATED)
    os.replace(tmp, target)
    return target


def _container_conf(tags: str, wait: bool, driver_env: Mapping[str, str] | None) -> dict[str, str]:
    on_path = "{{PWD}}/" + ALIAS  # YARN expands {{PWD}} to the container's working directory
    return {
        "spark.yarn.maxAppAttempts": "1",
        "spark.yarn.submit.waitAppCompletion": "true" if wait else "false",
        "spark.yarn.tags": tags,
        "spark.yarn.appMasterEnv.PYTHONPATH": on_path,
        "spark.executorEnv.PYTHONPATH": on_path,
        **{f"spark.yarn.appMasterEnv.{k}": v for k, v in sorted((driver_env or {}).items())},
    }


def _secret_conf(secret_env: Mapping[str, str] | None) -> dict[str, str]:
    """The driver container's secret variables as conf, for the 0600 properties file (``write_properties``)."""
    return {f"spark.yarn.appMasterEnv.{k}": v for k, v in sorted((secret_env or {}).items())}


def stream_submit(stream: str, registry: Path, bootstrap: str, archive: Path, *, standby: bool = False,
                  driver_env: Mapping[str, str] | None = None, secret_env: Mapping[str, str] | None = None
                  ) -> ClusterSubmit:
    """Pure: the spark-submit of ``stream`` in YARN's cluster mode. ``driver_env`` is set in the driver's
    container (no secrets: it is on the command line); ``secret_env`` too, through the properties file."""
    conf = _container_conf(f"rewind,{stream_tag(stream)}", False, driver_env)
    secret = _secret_conf(secret_env)
    args = [stream, "--registry", registry.name, "--bootstrap", bootstrap] + (["--standby"] if standby else [])
    return ClusterSubmit(args, conf, f"{archive}#{ALIAS}", str(registry), f"rewind-{stream}", secret)


def job_tag(stream: str) -> str:
    """The tag of a bounded job's application (a pre-flight, a replay) of ``stream``: not the stream's own
    (`stream_tag`), which finds the stream's driver."""
    return f"rewind-job-{stream}".lower()


def job_submit(stream: str, name: str, args: list[str], archive: Path, files: list[Path], *,
               driver_env: Mapping[str, str] | None = None, secret_env: Mapping[str, str] | None = None
               ) -> ClusterSubmit:
    """Pure: the spark-submit of one of Rewind's bounded jobs for ``stream`` in YARN's cluster mode. As a
    stream's, but spark-submit waits for the application's end (its exit status is the job's), and ``files``
    go with it: the job names them by their base names, in its container's working directory (``args`` must
    already do so)."""
    conf = _container_conf(f"rewind,{job_tag(stream)}", True, driver_env)
    secret = _secret_conf(secret_env)
    return ClusterSubmit(list(args), conf, f"{archive}#{ALIAS}", ",".join(str(f) for f in files), name, secret)


def write_properties(path: Path, conf: Mapping[str, str], defaults_dir: str | None = None) -> Path:
    """A ``--properties-file`` (mode 0600): ``conf`` after the deployment's ``spark-defaults.conf`` (which a
    properties file replaces for spark-submit, so its lines are carried over first)."""
    lines: list[str] = []
    if defaults_dir and (Path(defaults_dir) / "spark-defaults.conf").exists():
        lines += (Path(defaults_dir) / "spark-defaults.conf").read_text().splitlines()
    lines += [f"{k} {v}" for k, v in conf.items()]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
