"""Class-data sharing for the Spark drivers Rewind starts (``rewind.runtime.class_sharing``): when a driver's
spark-submit gets the archive's options, and that a JVM given them really maps Spark's classes from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewind.runtime.class_sharing import QUIET, STALE_S, archive, prune, submit_env, submit_opts


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REWIND_JVM_CACHE", str(tmp_path))
    monkeypatch.delenv("REWIND_CLASS_SHARING", raising=False)
    return tmp_path


def test_no_archive_changes_nothing(cache: Path) -> None:
    assert submit_opts(None) is None and submit_opts("-Xmx1g") == "-Xmx1g"


def test_an_archive_is_added_to_the_deployments_options(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = archive()
    assert path.parent == cache / "cds"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert submit_opts("-Xmx1g") == f"-Xmx1g -XX:SharedArchiveFile={path} {QUIET}"
    assert submit_opts(None) == f"-XX:SharedArchiveFile={path} {QUIET}"
    mine = "-XX:SharedArchiveFile=/opt/theirs.jsa"
    assert submit_opts(mine) == mine  # the deployment chose its own
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xmx1g")
    assert submit_env() == {"SPARK_SUBMIT_OPTS": f"-Xmx1g -XX:SharedArchiveFile={path} {QUIET}"}
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", mine)
    assert submit_env() == {}  # nothing to add
    monkeypatch.setenv("REWIND_CLASS_SHARING", "off")
    assert submit_opts("-Xmx1g") == "-Xmx1g"


def test_the_archive_is_keyed_by_the_class_paths_conf_folders(cache: Path, tmp_path: Path) -> None:
    """A driver whose SPARK_CONF_DIR (first on spark-submit's class path) differs gets another archive's name:
    the one built for the other class path would not map."""
    assert archive({"SPARK_CONF_DIR": str(tmp_path / "a")}) != archive({"SPARK_CONF_DIR": str(tmp_path / "b")})
    assert archive({}) == archive({})


def test_the_archive_is_keyed_by_each_jars_modification_time(cache: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM refuses an archive when a jar on the class path has another size or modification time ("A jar
    file is not the one used while building the shared archive file"): a PySpark reinstalled over the same
    path (a CI's fresh virtualenv) must get a new archive's name, not the old one it cannot map."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    jar = home / "jars" / "spark-core.jar"
    jar.write_bytes(b"x" * 10)
    monkeypatch.setenv("SPARK_HOME", str(home))
    before = archive()
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000))
    assert archive() != before
    jar.write_bytes(b"x" * 11)
    assert archive() != before


def test_building_an_archive_removes_those_no_jvm_opened_for_two_weeks(tmp_path: Path) -> None:
    keep, used, stale = (tmp_path / f"spark-{n}.jsa" for n in ("keep", "used", "stale"))
    other = tmp_path / "build.lock"
    for p in (keep, used, stale, other):
        p.write_bytes(b"")
    now = 10 * STALE_S
    for p in (keep, other, stale):
        os.utime(p, (now - STALE_S - 1, now - STALE_S - 1))
    os.utime(used, (now - STALE_S + 60, now - 3 * STALE_S))  # old, but a JVM opened it lately
    assert prune(keep, now=now) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.lock", "spark-keep.jsa", "spark-used.jsa"]


@pytest.mark.slow
def test_a_driver_jvm_maps_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    """The archive the suite's JVMs use is Rewind's (tests/harness/spark_cds.py builds it with
    ``class_sharing.build``): a spark-submit given ``submit_opts`` loads most classes from it (without it,
none: the assertion fails when the archive does not match the JVM's class path)."""
    import pyspark

    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "SharedArchiveFile" not in opts:
        pytest.skip("REWIND_TESTS_CDS=0: the suite runs without the archive")
    job = tmp_path / "job.py"
    job.write_text("from pyspark.sql import SparkSession\n"
                   "s = SparkSession.builder.master('local[1]').getOrCreate()\n"
                   "print(s.range(10).count())\ns.stop()\n")
    loads = tmp_path / "class-load.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "SPARK_SUBMIT_OPTS": f"{opts} -Xlog:class+load=info:file={loads}"}
    env.pop("SPARK_CONF_DIR", None)
    run = subprocess.run([str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), str(job)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("10"), run.stderr[-2000:]
    lines = loads.read_text().splitlines()
    shared = sum("source: shared objects file" in ln for ln in lines)
    spark = [ln for ln in lines if "org.apache.spark." in ln]
    # 2026-11-29: 12,548 of 16,953 classes, 4,443 of Spark's 7,012 (the rest are generated: lambdas, codegen)
    assert shared > 0.6 * len(lines) and sum("shared objects file" in ln for ln in spark) > 0.5 * len(spark), \
        (shared, len(lines))
