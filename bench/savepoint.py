"""Savepoint create and restore time vs state size, next to a plain boto3 copy of the same bytes.

Prints one JSON object. For each state size (default about 1, 20 and 100 MB) a real stateful
Spark query writes a fresh checkpoint: the Rewind Kafka source over demo events in the embedded
Kafka, a ``dropDuplicates`` over a 256-character key derived from each event (every event stays
in the RocksDB state store, so the state grows with the events read), ``noop`` sink, two state
partitions as in Rewind's streams. Rounds of "produce a chunk, run the query with availableNow"
go on until the files a resume needs (``checkpoint.resume_files``: metadata, offsets, commits,
RocksDB ``N.zip`` + the SST files they name) reach the size; every batch ends committed.

Then, against the embedded S3 (SeaweedFS via ``rewind.embedded.services.EmbeddedPlatform``), interleaved
and ``--runs`` times each (medians reported):

- create: ``rewind.checkpoints.savepoints.create_savepoint`` (what ``rewind savepoint create`` calls): inspect,
  list the resume files, SHA-256 and upload every file, write the manifest;
- boto3 upload: ``client.upload_file`` of the same files, one after another (the file list is
  given to it for free: the time to find it is not counted);
- restore: ``rewind.checkpoints.savepoints.restore_savepoint`` (what ``rewind savepoint restore`` calls):
  download every file checking size and SHA-256, re-verify the tree on disk, inspect it, move it
  into place, point the stream at it;
- boto3 download: ``client.download_file`` of the same objects into a fresh directory.

Target (issue 6): create within 1.5x of the boto3 upload. ``create_components_s`` times pieces of
create alone (inspection + file list, hashing every file) to show where its time goes.
Spark's and the services' output go to ``<work>/bench.log``; stdout holds only the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import keep_stdout_for_json  # noqa: E402

TARGET_CREATE_RATIO = 1.5
MB = 1_000_000


def resume_set(root: Path) -> tuple[list[str], int]:
    """The files a savepoint of ``root`` copies, and their total bytes."""
    from rewind.checkpoints.inspection import resume_files

    rels = resume_files(root)
    return rels, sum((root / r).stat().st_size for r in rels)


def build_checkpoint(spark: Any, bootstrap: str, topic: str, path: Path, target_bytes: int,
                     timeout_s: float = 1200.0) -> dict[str, Any]:
    """A real stateful query over Kafka into a fresh checkpoint until its resume set holds >= ``target_bytes``.

    Rounds: produce a chunk of events, run the query with ``availableNow`` to the end of the topic (two
    micro-batches per chunk), measure the resume set; the first round calibrates the bytes per event.
    """
    from pyspark.sql import functions as F

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.kafka.options import SOURCE_NAME

    settings = {"spark.sql.shuffle.partitions": "2",
                # keep every version: nothing is cleaned up under the copy
                "spark.sql.streaming.minBatchesToRetain": "100000"}
    saved = {k: spark.conf.get(k, None) for k in settings}
    started = time.perf_counter()
    sent, size, rounds = 0, 0, 0
    chunk = max(200, target_bytes // 240 // 4)  # ~240 bytes of state per event: about 4 rounds
    while size < target_bytes:
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"{path}: state did not reach {target_bytes} bytes in {timeout_s:.0f} s")
        produce(bootstrap, ProduceSpec(topic=topic, count=chunk, partitions=2, id_prefix=topic, start_seq=sent))
        sent += chunk
        for k, v in settings.items():
            spark.conf.set(k, v)
        try:
            rows = (spark.readStream.format(SOURCE_NAME).option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", max(1, chunk // 2)).load())
            v = F.col("value").cast("string")
            # 256 hex characters that differ per event: the state holds one such key per event read
            keyed = rows.select(F.concat(F.sha2(F.concat(F.lit("a"), v), 512), F.sha2(F.concat(F.lit("b"), v), 512))
                                .alias("k"), F.col("offset"))
            query = (keyed.dropDuplicates(["k"]).writeStream.format("noop").outputMode("append")
                     .queryName(f"bench_savepoint_{path.name}").option("checkpointLocation", str(path))
                     .trigger(availableNow=True).start())
        finally:
            for k, old in saved.items():
                spark.conf.unset(k) if old is None else spark.conf.set(k, old)
        try:
            query.awaitTermination(timeout_s)
            if query.exception() is not None:
                raise RuntimeError(f"checkpoint query failed: {query.exception()}")
        finally:
            query.stop()
        rounds += 1
        size = resume_set(path)[1]
        if size < target_bytes:  # calibrated: what is still missing, in at most two more rounds
            chunk = max(200, int((target_bytes - size) / max(size / sent, 1.0) / (2 if rounds == 1 else 1)) + 200)
    from rewind.checkpoints.inspection import inspect_checkpoint

    rels, size = resume_set(path)
    return {"seconds": round(time.perf_counter() - started, 1), "events": sent, "rounds": rounds,
            "last_batch": inspect_checkpoint(path).last_complete, "files": len(rels), "bytes": size}


def boto3_upload(client: Any, bucket: str, root: Path, rels: list[str], prefix: str) -> None:
    for rel in rels:
        client.upload_file(str(root / rel), bucket, prefix + rel)


def boto3_download(client: Any, bucket: str, keys: list[tuple[str, str]], dest: Path) -> None:
    for key, rel in keys:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))


def hash_all(root: Path, rels: list[str]) -> None:
    from rewind.storage import sha256_of

    for rel in rels:
        with open(root / rel, "rb") as fh:
            sha256_of(fh)


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def bench_size(label: str, spec: Any, store: Any, plain: Any, root: Path, work: Path, runs: int) -> dict[str, Any]:
    from rewind.checkpoints.savepoints import create_savepoint, restore_savepoint

    rels, size = resume_set(root)
    create_s, upload_s, restore_s, download_s = [], [], [], []
    manifests = []
    for i in range(runs):  # interleaved, so a burst of other load lands on both sides
        s, manifest = timed(lambda: create_savepoint(spec, store, checkpoint=root))
        create_s.append(s)
        manifests.append(manifest)
        prefix = f"bench-boto3/{label}-{i}/"
        upload_s.append(timed(lambda: boto3_upload(plain, store.bucket, root, rels, prefix))[0])
    assert sorted(f.path for f in manifests[0].files) == sorted(rels), "the savepoint copied the resume set"
    for i, manifest in enumerate(manifests):
        s, result = timed(lambda: restore_savepoint(spec, store, manifest.savepoint_id, running=None,
                                                    to=work / f"restored-{label}-{i}"))
        restore_s.append(s)
        assert result.manifest.batch_id == manifest.batch_id
        keys = [(f"bench-boto3/{label}-{i}/{rel}", rel) for rel in rels]
        download_s.append(timed(lambda: boto3_download(plain, store.bucket, keys, work / f"boto3-{label}-{i}"))[0])
        shutil.rmtree(work / f"restored-{label}-{i}", ignore_errors=True)
        shutil.rmtree(work / f"boto3-{label}-{i}", ignore_errors=True)

    from rewind.checkpoints.inspection import inspect_checkpoint

    inspect_s = [timed(lambda: resume_set(root))[0] + timed(lambda: inspect_checkpoint(root))[0] for _ in range(3)]
    hash_s = [timed(lambda: hash_all(root, rels))[0] for _ in range(3)]
    c, u, r, d = median(create_s), median(upload_s), median(restore_s), median(download_s)
    return {
        "label": label, "bytes": size, "mb": round(size / MB, 1), "files": len(rels),
        "largest_file_bytes": max((root / rel).stat().st_size for rel in rels),
        "create_s": c, "boto3_upload_s": u, "create_ratio": round(c / u, 2),
        "restore_s": r, "boto3_download_s": d, "restore_ratio": round(r / d, 2),
        "create_mb_per_s": round(size / MB / c, 1), "boto3_upload_mb_per_s": round(size / MB / u, 1),
        "meets_create_target": c / u <= TARGET_CREATE_RATIO,
        "runs_s": {"create": [round(x, 3) for x in create_s], "boto3_upload": [round(x, 3) for x in upload_s],
                   "restore": [round(x, 3) for x in restore_s], "boto3_download": [round(x, 3) for x in download_s]},
        "create_components_s": {"inspect_and_resume_list": median(inspect_s), "sha256_all_files": median(hash_s)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="1,20,100", help="state sizes, MB of resume files (comma-separated)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of each operation (median)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its path is in the JSON)")
    args = ap.parse_args()
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-savepoint-"))
    out = keep_stdout_for_json(work / "bench.log")
    load_start = round(os.getloadavg()[0], 2)

    from rewind.driver.spark_session import build_session
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.registry import load_registry
    from rewind.storage import S3Config, S3Storage
    from tests.harness.registry_templates import demo_stream, write_registry

    labels = [f"{s:g}MB" for s in sizes]
    topics = [f"bench-sp-{i}" for i in range(len(sizes))]
    reg = load_registry(write_registry(work / "streams.yaml",
                                       *(demo_stream(f"sp{i}", t, work) for i, t in enumerate(topics))))
    import boto3
    from botocore.config import Config

    results = []
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        os.environ.update(info.env())
        spark = build_session("rewind-bench-savepoint")
        built = {}
        try:
            for label, mb, topic in zip(labels, sizes, topics):
                built[label] = build_checkpoint(spark, info.kafka_bootstrap, topic, work / "cp" / label,
                                                int(mb * MB))
        finally:
            spark.stop()  # nothing of Spark runs while the copies are timed
        store = S3Storage(S3Config.from_platform(info))
        plain = boto3.client("s3", endpoint_url=info.s3_endpoint, aws_access_key_id=info.s3_access_key,
                             aws_secret_access_key=info.s3_secret_key, region_name=info.s3_region,
                             config=Config(s3={"addressing_style": "path"}))
        # warm-up: first requests pay for connections and botocore's lazy loading on both sides
        store.write_bytes("bench-warmup", b"x")
        plain.put_object(Bucket=store.bucket, Key="bench-warmup", Body=b"x")
        for i, label in enumerate(labels):
            results.append({**bench_size(label, reg.get(f"sp{i}"), store, plain, work / "cp" / label, work,
                                         args.runs), "checkpoint": built[label]})
    result = {
        "benchmark": "savepoint", "runs": args.runs, "target_create_ratio": TARGET_CREATE_RATIO,
        "meets_target": all(r["meets_create_target"] for r in results),
        "machine": {"cores": os.cpu_count(), "load_avg_1m_at_start": load_start,
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "sizes": results, "log": str(work / "bench.log"),
    }
    if args.keep:
        result["work_dir"] = str(work)
    else:
        shutil.rmtree(work / "cp", ignore_errors=True)
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
