"""Spark's native libraries, unpacked once per host instead of into ``/tmp`` by every JVM.

Why: RocksDB's JNI library (14.7 MB, ``rocksdbjni``) and LZ4's (``lz4-java``) ship inside their jars. Each JVM
that loads them copies the library out to a new file in ``java.io.tmpdir`` and deletes it in a shutdown hook,
which a SIGKILL, the kernel's OOM killer or a lost container never run. Every killed stream driver (the case
Rewind exists for) left 15 MB behind: 205 RocksDB copies, 3 GB, in this machine's ``/tmp`` after a day of
tests; a supervisor relaunching a crash-looping stream all night fills a worker's disk. Each start also
inflates and writes those 15 MB on the way to the first batch (about 0.1 s of CPU).

How: both libraries try ``System.loadLibrary`` before unpacking (RocksDB's ``NativeLibraryLoader``, LZ4's
``Native.load``), which searches ``java.library.path``, which the JVM builds on Linux from
``LD_LIBRARY_PATH``. So the libraries of this Spark installation's jars are unpacked once into
``REWIND_JVM_CACHE/native/<key>/`` (key: the jars' names, sizes and modification times and the machine's
architecture, so a library never meets another version's classes), and a driver's JVM starts with that
folder first on ``LD_LIBRARY_PATH``. The folder holds only those libraries, so nothing else resolves
differently. Written library by library to a temporary name and renamed, so concurrent starts never load a
half-written file. Left as before: another OS or a musl libc (the jars' other variants, chosen by their own
loaders), a driver in a YARN container (the container's temp dir goes with it) and
``REWIND_NATIVE_LIBS=off``. Snappy and zstd unpack the same way but Spark uses neither by default.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rewind.runtime.jars import spark_home
from rewind.settings import jvm_cache_dir, native_libs_enabled

__all__ = ["jvm_library_path", "library_dir", "library_env", "wanted"]

#: ``uname -m`` -> (RocksDB's platform name, LZ4's architecture folder), for glibc Linux.
PLATFORMS = {
    "x86_64": ("linux64", "amd64"),
    "aarch64": ("linux-aarch64", "aarch64"),
    "ppc64le": ("linux-ppc64le", "ppc64le"),
    "s390x": ("linux-s390x", "s390x"),
    "riscv64": ("linux-riscv64", "riscv64"),
}


def wanted(jar_names: list[str], machine: str | None = None) -> dict[str, tuple[str, str]]:
    """Which library each jar holds for this machine: ``{file name: (jar name, entry in the jar)}``.
    The file names are what ``System.loadLibrary`` looks for (``librocksdbjni-linux64.so``, ``liblz4-java.so``)."""
    names = PLATFORMS.get(machine or platform.machine())
    if names is None:
        return {}
    rocks, lz4 = names
    out: dict[str, tuple[str, str]] = {}
    for jar in jar_names:
        if jar.startswith("rocksdbjni-") and jar.endswith(".jar"):
            out[f"librocksdbjni-{rocks}.so"] = (jar, f"librocksdbjni-{rocks}.so")
        elif jar.startswith("lz4-java-") and jar.endswith(".jar"):
            out["liblz4-java.so"] = (jar, f"net/jpountz/util/linux/{lz4}/liblz4-java.so")
    return out


def _applies() -> bool:
    """On, on Linux with glibc (``confstr`` answers at once; ``platform.libc_ver`` reads the interpreter's binary)."""
    if not native_libs_enabled() or not sys.platform.startswith("linux"):
        return False
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # musl and others have no such name
        return False


def library_dir(jars_dir: Path) -> Path | None:
    """The folder with this installation's native libraries, unpacked if it is not there yet (about 0.1 s,
    once); None where it does not apply or a jar lacks the library (its own loader then does as before)."""
    if not _applies() or not jars_dir.is_dir():
        return None
    jars = {p.name: p for p in jars_dir.glob("*.jar")}
    libs = wanted(sorted(jars))
    if not libs:
        return None
    stamp = sorted(f"{jar}:{st.st_size}:{st.st_mtime_ns}" for jar, _ in libs.values() for st in [jars[jar].stat()])
    key = hashlib.sha256("\n".join([platform.machine(), *stamp]).encode()).hexdigest()[:16]
    folder = jvm_cache_dir() / "native" / key
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, (jar, entry) in libs.items():
            if not (folder / name).exists():
                _unpack(jars[jar], entry, folder / name)
    except (OSError, KeyError, zipfile.BadZipFile):  # a read-only cache, an unexpected jar: as before
        return None
    return folder


def _unpack(jar: Path, entry: str, target: Path) -> None:
    """Into a file of its own (unique even across PID namespaces sharing the cache), then renamed."""
    fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with zipfile.ZipFile(jar) as z, z.open(entry) as src, os.fdopen(fd, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.chmod(partial, 0o755)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def library_env(jars_dir: Path | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """``LD_LIBRARY_PATH`` with the libraries' folder first, for a JVM started on this host from ``jars_dir``
    (default: the Spark installation spark-submit runs from); else nothing."""
    try:
        folder = library_dir(jars_dir or spark_home() / "jars")
    except ImportError:  # no PySpark here (an Airflow worker without it): as before
        return {}
    if folder is None:
        return {}
    current = (os.environ if env is None else env).get("LD_LIBRARY_PATH", "")
    if str(folder) in current.split(os.pathsep):
        return {}
    return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(folder), current) if p)}


@contextmanager
def jvm_library_path() -> Iterator[None]:
    """``library_env`` in this process's environment while it starts a JVM (pyspark's ``getOrCreate``), then
    as it was: the JVM keeps what it started with, and this process's later children (a Kafka Streams app
    with another RocksDB, say) do not inherit the folder."""
    before = os.environ.get("LD_LIBRARY_PATH")
    os.environ.update(library_env())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = before
