"""Spark's native libraries come from one folder per host, not a copy in /tmp per JVM (runtime.native_libs)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from rewind.runtime import native_libs
from rewind.runtime.native_libs import library_dir, library_env, wanted


def test_each_jar_gives_the_file_its_loader_looks_for() -> None:
    jars = ["rocksdbjni-9.8.4.jar", "lz4-java-1.11.0.jar", "snappy-java-1.1.10.8.jar", "rocksdbjni-9.8.4.pom"]
    assert wanted(jars, "x86_64") == {
        "librocksdbjni-linux64.so": ("rocksdbjni-9.8.4.jar", "librocksdbjni-linux64.so"),
        "liblz4-java.so": ("lz4-java-1.11.0.jar", "net/jpountz/util/linux/amd64/liblz4-java.so"),
    }
    assert wanted(jars, "aarch64")["librocksdbjni-linux-aarch64.so"][1] == "librocksdbjni-linux-aarch64.so"
    assert wanted(jars, "aarch64")["liblz4-java.so"][1] == "net/jpountz/util/linux/aarch64/liblz4-java.so"
    assert wanted(jars, "sparc") == {}  # left to the jars' own loaders


def _jars(folder: Path, rocks: bytes = b"rocks", lz4: bytes = b"lz4") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    arch = native_libs.PLATFORMS[native_libs.platform.machine()]
    with zipfile.ZipFile(folder / "rocksdbjni-9.8.4.jar", "w") as z:
        z.writestr(f"librocksdbjni-{arch[0]}.so", rocks)
    with zipfile.ZipFile(folder / "lz4-java-1.11.0.jar", "w") as z:
        z.writestr(f"net/jpountz/util/linux/{arch[1]}/liblz4-java.so", lz4)
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if native_libs.platform.machine() not in native_libs.PLATFORMS or not native_libs._applies():
        pytest.skip("not a glibc Linux machine Rewind unpacks for")
    monkeypatch.setenv("REWIND_JVM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_libraries_are_unpacked_once_per_version_of_their_jars(tmp_path: Path, cache: Path) -> None:
    jars = _jars(tmp_path / "jars", rocks=b"R" * 3_000_000)
    folder = library_dir(jars)
    assert folder is not None and folder.parent == cache / "native"
    assert sorted(p.name for p in folder.iterdir()) == sorted(wanted(["rocksdbjni-9.8.4.jar", "lz4-java-1.11.0.jar"]))
    rocks = next(folder.glob("librocksdbjni-*.so"))
    assert rocks.read_bytes() == b"R" * 3_000_000 and (folder / "liblz4-java.so").read_bytes() == b"lz4"
    written = rocks.stat().st_mtime_ns
    assert library_dir(jars) == folder and rocks.stat().st_mtime_ns == written  # not unpacked again
    jar = jars / "rocksdbjni-9.8.4.jar"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000))  # another install
    assert library_dir(jars) not in (None, folder)


def test_the_folder_goes_first_on_the_library_path_once(tmp_path: Path, cache: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    jars = _jars(tmp_path / "jars")
    folder = str(library_dir(jars))
    assert library_env(jars, {}) == {"LD_LIBRARY_PATH": folder}
    assert library_env(jars, {"LD_LIBRARY_PATH": "/opt/hadoop/lib/native"}) == {
        "LD_LIBRARY_PATH": f"{folder}{os.pathsep}/opt/hadoop/lib/native"}
    assert library_env(jars, {"LD_LIBRARY_PATH": f"{folder}{os.pathsep}/x"}) == {}
    assert library_env(tmp_path / "none") == {}  # no jars there: as before
    monkeypatch.setenv("REWIND_NATIVE_LIBS", "off")
    assert library_env(jars, {}) == {}


def test_a_jar_without_the_library_changes_nothing(tmp_path: Path, cache: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    with zipfile.ZipFile(jars / "rocksdbjni-9.8.4.jar", "w") as z:
        z.writestr("librocksdbjni-osx-arm64.jnilib", b"mac only")
    assert library_dir(jars) is None


def test_a_session_rewind_starts_loads_rocksdb_and_lz4_from_the_folder(spark) -> None:
    """Real JVM: RocksDB's and LZ4's loaders map the libraries from Rewind's folder, and no copy of either
    is written to the JVM's temp dir (before: a new 15-MB file there per JVM, never removed after a SIGKILL)."""
    jvm = spark.sparkContext._jvm
    if not native_libs._applies():
        pytest.skip("not a glibc Linux machine")
    jvm.org.rocksdb.RocksDB.loadLibrary()
    assert jvm.net.jpountz.lz4.LZ4Factory.nativeInstance() is not None
    pid = jvm.java.lang.ProcessHandle.current().pid()
    tmp = jvm.java.lang.System.getProperty("java.io.tmpdir")
    maps = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if "librocksdbjni" in line or "liblz4-java" in line}
    folder = library_dir(native_libs.spark_home() / "jars")
    assert folder is not None
    assert maps == {str(p) for p in folder.iterdir()}, maps
    assert not any(m.startswith(tmp) for m in maps)


def test_the_folder_is_on_the_path_only_while_a_jvm_starts(tmp_path: Path, cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    home = _jars(tmp_path / "spark" / "jars").parent
    monkeypatch.setattr(native_libs, "spark_home", lambda: home)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    with native_libs.jvm_library_path():
        inside = os.environ["LD_LIBRARY_PATH"]
    assert inside == str(library_dir(tmp_path / "spark" / "jars")) and "LD_LIBRARY_PATH" not in os.environ
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/theirs")
    with native_libs.jvm_library_path():
        assert os.environ["LD_LIBRARY_PATH"] == f"{inside}{os.pathsep}/opt/theirs"
    assert os.environ["LD_LIBRARY_PATH"] == "/opt/theirs"


def test_a_spark_submit_rewind_runs_gets_the_folder_only_for_a_driver_on_this_worker() -> None:
    """The Airflow launch's environment (``rewind_airflow.hooks.stream.submit_env``): a driver on this worker
    finds the libraries there; a driver in a YARN container gets nothing of this worker's."""
    from rewind_airflow.hooks.stream import submit_env

    if not native_libs._applies():
        pytest.skip("not a glibc Linux machine")
    folder = library_dir(native_libs.spark_home() / "jars")
    assert folder is not None
    assert submit_env(driver_on_worker=True)["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(folder)
    assert "LD_LIBRARY_PATH" not in submit_env(driver_on_worker=False)
