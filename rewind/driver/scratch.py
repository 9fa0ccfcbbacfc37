"""A stream driver's scratch space (``spark.local.dir``): one directory per driver, swept when the next starts.

Why: Spark keeps a driver's working files in ``spark-<uuid>`` under ``spark.local.dir`` (``/tmp`` by
default): the RocksDB state stores' working copies, the jars it serves its executors, shuffle blocks. It
removes them in a shutdown hook, which a SIGKILL, the kernel's OOM killer or a lost container never run.
Measured here: 70 MB a killed demo driver, 17 GB in ``/tmp`` after a few days of tests that kill
drivers. A supervisor that relaunches a crash-looping stream all night fills the worker's disk.

So a driver Rewind starts on a local or client-mode host works in
``<temp dir>/rewind-scratch/<stream>/<host>-<where>-<pid>-<start>`` (local disk, where Spark's own would be),
and each new driver of the stream first removes the directories of drivers that ran where it runs and are gone
(a pid that is not running, or running but started at another time: reused). Left alone: a deployment's own
``spark.local.dir``, ``SPARK_LOCAL_DIRS`` (YARN's containers get theirs from the NodeManager, which
cleans them) and the directories of other hosts. ``where`` is what a pid means something in: the host name,
the PID namespace and the kernel's boot (as the driver lease's holder, ``rewind.control.leases.me``); two
containers or ``unshare``d hosts with the same name and a shared temp dir see each other's pids as gone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path

import psutil

from rewind.control.leases import me

log = logging.getLogger("rewind.driver")

#: Spark's own ways of choosing the directory; where one is set, the directory is the deployment's.
DEPLOYMENT_KEYS = ("SPARK_LOCAL_DIRS", "LOCAL_DIRS")


def scratch_root(stream: str) -> Path:
    return Path(tempfile.gettempdir()) / "rewind-scratch" / stream


def _host() -> str:
    return socket.gethostname().split(".")[0] or "host"


def _where() -> str:
    """Which pids this process sees: a digest of its host name, PID namespace and boot."""
    holder = me()
    return hashlib.sha256(f"{holder.host}|{holder.pidns}|{holder.boot_id}".encode()).hexdigest()[:10]


def own_name(pid: int | None = None) -> str:
    """``<host>-<where>-<pid>-<start in ms>``: unique where pids mean something, even when a pid is reused."""
    proc = psutil.Process(pid)
    return f"{_host()}-{_where()}-{proc.pid}-{int(proc.create_time() * 1000)}"


def _gone(pid: int, start_ms: int) -> bool:
    """Whether the driver that named a directory ``<host>-<where>-<pid>-<start>`` where this one runs has ended."""
    try:
        return int(psutil.Process(pid).create_time() * 1000) != start_ms
    except psutil.NoSuchProcess:
        return True


def _size(path: Path) -> int:
    """Bytes under ``path``, as far as they can be read (another driver may be removing it)."""
    total = 0
    try:
        for f in path.rglob("*"):
            total += f.lstat().st_size if f.is_file() else 0
    except OSError:
        pass
    return total


def sweep(root: Path) -> tuple[list[Path], int]:
    """Remove the directories under ``root`` of drivers that ran where this one runs and have ended; (removed,
    bytes freed)."""
    removed, freed = [], 0
    where = _where()
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        parts = entry.name.rsplit("-", 3)
        if len(parts) != 4 or parts[1] != where or not (parts[2].isdigit() and parts[3].isdigit()):
            continue  # another host's or PID namespace's, or not one of ours
        if not _gone(int(parts[2]), int(parts[3])):
            continue
        freed += _size(entry)
        shutil.rmtree(entry, ignore_errors=True)  # a driver starting beside this one may be removing it too
        removed.append(entry)
    return removed, freed


def driver_local_dir(stream: str, asked: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str | None:
    """This driver's ``spark.local.dir`` (created, after sweeping its stream's ended drivers), or None when the
    deployment chose the directory (``asked``: its Spark settings and the registry's; ``environ``)."""
    environ = os.environ if environ is None else environ
    if "spark.local.dir" in asked or any(environ.get(k) for k in DEPLOYMENT_KEYS):
        return None
    root = scratch_root(stream)
    try:
        removed, freed = sweep(root)
        mine = root / own_name()
        mine.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. another OS user's directory: Spark's default, as before
        log.warning("no scratch space of its own for %s under %s (%s): Spark's default spark.local.dir", stream,
                    root, exc)
        return None
    if removed:
        log.info("removed the scratch space of %d ended driver(s) of %s (%.1f MB): %s", len(removed), stream,
                 freed / 1e6, ", ".join(p.name for p in removed))
    return str(mine)
