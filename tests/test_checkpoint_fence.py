"""Rewind's checkpoint file manager in the JVM (``io.rewind.checkpoint.FencedCheckpointFileManager``):
files that plan and commit batches are created only if absent, nothing is written once the lease
granted to the checkpoint lapsed or was fenced, and a real streaming query writes through it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rewind.driver.checkpoint_fence import FENCED_MANAGER, use_fenced_file_manager


def manager(spark: Any, root: Path) -> Any:
    jvm = spark._jvm
    return getattr(jvm, FENCED_MANAGER)(jvm.org.apache.hadoop.fs.Path(str(root)), spark._jsc.hadoopConfiguration())


def write(spark: Any, fm: Any, path: Path, data: bytes, overwrite: bool = False) -> None:
    out = fm.createAtomic(spark._jvm.org.apache.hadoop.fs.Path(str(path)), overwrite)
    out.write(bytearray(data))
    out.close()


def java_error(exc: BaseException) -> str:
    return next((line for line in str(exc).splitlines() if "Exception" in line), str(exc))


def test_a_planned_batch_is_written_once_and_a_lapsed_or_fenced_lease_writes_nothing(spark: Any,
                                                                                     tmp_path: Path) -> None:
    cls = getattr(spark._jvm, FENCED_MANAGER)
    fm = manager(spark, tmp_path)
    write(spark, fm, tmp_path / "offsets" / "7", b"planned by A")
    with pytest.raises(Exception) as second:  # noqa: PT011 - a py4j error carrying the Java exception
        write(spark, fm, tmp_path / "offsets" / "7", b"planned again by B")
    assert "FileAlreadyExistsException" in java_error(second.value)
    assert (tmp_path / "offsets" / "7").read_bytes() == b"planned by A"
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == ["7"], "a temp file was left behind"

    cls.hold(str(tmp_path), 3, int((time.time() - 1) * 1000))  # a lease whose local deadline has passed
    with pytest.raises(Exception) as lapsed:  # noqa: PT011
        write(spark, fm, tmp_path / "state" / "0" / "0" / "8.changelog", b"s", overwrite=True)
    assert "lease of epoch 3 was not renewed in time" in java_error(lapsed.value)
    cls.hold(str(tmp_path), 3, int((time.time() + 30) * 1000))  # renewed
    write(spark, fm, tmp_path / "state" / "0" / "0" / "8.changelog", b"s", overwrite=True)
    cls.fence(str(tmp_path), "fenced: epoch 3 was taken over by epoch 4 on host-b")
    with pytest.raises(Exception) as fenced:  # noqa: PT011
        write(spark, fm, tmp_path / "commits" / "7", b"c")
    assert "fenced: epoch 3 was taken over by epoch 4 on host-b" in java_error(fenced.value)
    with pytest.raises(Exception):  # noqa: B017,PT011 - deletes too (Spark purges old batches)
        fm.delete(spark._jvm.org.apache.hadoop.fs.Path(str(tmp_path / "offsets" / "7")))
    assert not (tmp_path / "commits" / "7").exists() and (tmp_path / "offsets" / "7").exists()
    other = tmp_path.parent / f"{tmp_path.name}-other"  # another checkpoint has no grant: written as by Spark
    write(spark, manager(spark, other), other / "offsets" / "0", b"x")
    cls.forget(str(tmp_path))


def test_a_query_writes_its_checkpoint_through_it_and_dies_when_fenced(spark: Any, tmp_path: Path) -> None:
    cls = getattr(spark._jvm, FENCED_MANAGER)
    checkpoint = tmp_path / "cp"
    cls.hold(str(checkpoint), 1, int((time.time() + 600) * 1000))
    use_fenced_file_manager(spark)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="0.5 seconds").start())
    try:
        deadline = time.monotonic() + 60
        while not (checkpoint / "commits" / "1").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (checkpoint / "commits" / "1").exists(), "the query committed no batch"
        cls.fence(str(checkpoint), "fenced: epoch 1 was taken over by epoch 2 on host-b")
        fenced_at = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        with pytest.raises(Exception, match="fenced: epoch 1 was taken over by epoch 2 on host-b"):  # noqa: PT011
            query.awaitTermination(60)
        planned = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        assert planned <= fenced_at + 1, "batches were planned after the fence"
    finally:
        query.stop()
        cls.forget(str(checkpoint))
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")


S3A_PROBE = """
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Path;
import io.rewind.checkpoint.FencedCheckpointFileManager;

public class S3aProbe {
  static String write(FencedCheckpointFileManager fm, Path p, String data) {
    try {
      FSDataOutputStream out = fm.createAtomic(p, false);
      out.write(data.getBytes("UTF-8"));
      out.close();
      return "written";
    } catch (Throwable e) {
      return e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  public static void main(String[] a) throws Exception {
    Configuration conf = new Configuration();
    conf.set("fs.s3a.endpoint", a[0]);
    conf.set("fs.s3a.access.key", a[1]);
    conf.set("fs.s3a.secret.key", a[2]);
    conf.set("fs.s3a.path.style.access", "true");
    conf.set("fs.s3a.connection.ssl.enabled", "false");
    conf.set("fs.s3a.endpoint.region", "us-east-1");
    Path root = new Path(a[3]);
    FencedCheckpointFileManager fm = new FencedCheckpointFileManager(root, conf);
    System.out.println("first|" + write(fm, new Path(root, "offsets/0"), "planned by A"));
    System.out.println("second|" + write(fm, new Path(root, "offsets/0"), "planned by B"));
    FencedCheckpointFileManager.hold(a[3], 7, System.currentTimeMillis() - 1000);
    System.out.println("lapsed|" + write(fm, new Path(root, "offsets/1"), "x"));
  }
}
"""


def test_on_s3a_a_planned_batch_is_created_only_if_absent(platform: Any, tmp_path: Path) -> None:
    """S3 has no atomic rename: on S3A the manager creates offsets and commits with If-None-Match
    (Hadoop's conditional create), so a second planner of a batch is refused at the write itself."""
    import subprocess

    from rewind.runtime.jars import java_binary, s3a_jars
    from rewind.runtime.jvm import _pyspark_jars, _tool, rewind_jar

    (tmp_path / "S3aProbe.java").write_text(S3A_PROBE)
    compile_path = ":".join([str(_pyspark_jars() / "*"), rewind_jar()])
    subprocess.run([_tool("javac"), "-nowarn", "-d", str(tmp_path), "-cp", compile_path,
                    str(tmp_path / "S3aProbe.java")], check=True, capture_output=True)
    classpath = ":".join([compile_path, *s3a_jars()])
    prefix = f"s3a://{platform.bucket}/fence-probe/{tmp_path.name}"
    done = subprocess.run([java_binary(), "-cp", f"{tmp_path}:{classpath}", "S3aProbe", platform.s3_endpoint,
                           platform.s3_access_key, platform.s3_secret_key, prefix], capture_output=True, text=True,
                          timeout=120)
    out = dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
    assert out.get("first") == "written", done.stdout + done.stderr[-3000:]
    assert out.get("second", "").startswith("FileAlreadyExistsException"), out
    assert "lease of epoch 7 was not renewed in time" in out.get("lapsed", ""), out
    body = platform.s3.client().get_object(Bucket=platform.bucket, Key=f"fence-probe/{tmp_path.name}/offsets/0")
    assert body["Body"].read() == b"planned by A"
