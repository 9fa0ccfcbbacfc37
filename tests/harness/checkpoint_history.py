"""Generate real Spark checkpoints with a long history (issue: inspection must not grow with age).

A checkpoint with thousands of batches can only be trusted as a test input if Spark itself wrote
it, so this runs a real stateful streaming query (``rate-micro-batch`` source, watermark, windowed
count on the session's RocksDB state store, ``noop`` sink) back to back until enough batches have
committed. Spark normally keeps only the newest ``spark.sql.streaming.minBatchesToRetain`` (100)
batches of offsets, commits and state versions; that is raised for the query so every batch stays
on disk, and the files are counted afterwards to prove it.

Speed on 2 cores shared with other Spark jobs: 5-9 batches/s, 2,000 batches in 4-7 minutes,
bounded by Spark's fixed per-batch work in the driver (planning, closure cleaning, progress).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewind.driver.spark_session import CHANGELOG, FILE_MANAGER, FS_MANAGER

_RETAIN = "spark.sql.streaming.minBatchesToRetain"
_PARTITIONS = "spark.sql.shuffle.partitions"
# Per batch the driver re-plans and re-generates code for ten rows; interpreted execution cut the
# JVM's CPU per batch by ~20% (measured: ~120 -> ~100 ms). It changes no file in the checkpoint.
_NO_CODEGEN = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def _ids(directory: Path) -> list[int]:
    """Batch ids named in a log directory (offsets/ or commits/); [] if it does not exist yet."""
    try:
        return sorted(int(e.name) for e in os.scandir(directory) if e.name.isdigit())
    except FileNotFoundError:
        return []


def count_files(path: Path) -> dict[str, Any]:
    """What a checkpoint holds: log entries, state version files per operator/partition, all files."""
    state: dict[str, dict[str, int]] = {}
    state_root = path / "state"
    if state_root.is_dir():
        for op in sorted(e.name for e in os.scandir(state_root) if e.is_dir() and e.name.isdigit()):
            state[op] = {}
            for part in sorted((e.name for e in os.scandir(state_root / op) if e.is_dir() and e.name.isdigit()),
                               key=int):
                state[op][part] = sum(1 for f in os.scandir(state_root / op / part)
                                      if f.is_file() and f.name.split(".")[0].isdigit())
    total = sum(len(files) for _, _, files in os.walk(path))
    return {"offsets": len(_ids(path / "offsets")), "commits": len(_ids(path / "commits")),
            "state_versions": state, "total": total}


def generate_checkpoint(spark: Any, path: Path, batches: int, *, partitions: int = 2,
                        rows_per_batch: int = 10, changelog: bool = False, drain: bool = True,
                        timeout_s: float = 1800.0) -> dict[str, Any]:
    """Run a real stateful query into a fresh checkpoint at ``path`` until >= ``batches`` have committed.

    Uses the caller's session (never creates one). The query's settings (``shuffle.partitions`` =
    state partitions, fixed into the checkpoint at first start; ``minBatchesToRetain``; the file
    manager; RocksDB changelog checkpointing, off by default here so that every state version has
    its own ``N.zip``, the layout with the most files (Rewind's streams turn it on); interpreted
    execution) are set only while it starts: the query keeps its own copy, the session gets its old
    values back at once.

    ``batches_per_s`` is measured up to the target, before the stop and the drain. Stopping
    interrupts whatever batch is in flight, so the tail would depend on timing (one
    planned, uncommitted batch, or none). With ``drain`` the query is restarted once with
    ``availableNow``, which re-runs that batch and ends on its own: the checkpoint always ends
    like a cleanly stopped stream, every planned batch committed, and two checkpoints of
    different lengths have the same shape at the end. Returns facts about the run and the files.
    """
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} is not empty: generate_checkpoint needs a fresh checkpoint directory")
    if batches < 1:
        raise ValueError("batches must be >= 1")
    settings = {
        # Keep every batch (Spark purges all but the newest 100 offsets/commits/state versions);
        # margin for the batches that commit between reaching the target and the stop.
        _RETAIN: str(batches + 100_000),
        _PARTITIONS: str(partitions),
        # As Rewind's streams write local checkpoints (why: spark_session.use_checkpoint_file_manager);
        # it made this query 2x faster (~9 readlink + ~3 chmod forks per batch with the FileContext one).
        FILE_MANAGER: FS_MANAGER,
        CHANGELOG: str(changelog).lower(),
        **_NO_CODEGEN,
    }
    started = time.perf_counter()
    query = _start(spark, path, settings, rows_per_batch, available_now=False)
    try:
        commits = path / "commits"
        while True:
            done = len(_ids(commits))
            if done >= batches:
                break
            if not query.isActive:
                raise RuntimeError(f"query stopped after {done} batches: {query.exception()}")
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"only {done} of {batches} batches committed in {timeout_s:.0f} s")
            time.sleep(0.05 if batches - done < 50 else 0.25)
        reached = time.perf_counter() - started
        query_id = str(query.id)
    finally:
        query.stop()
    seconds = time.perf_counter() - started
    interrupted = len(_ids(path / "offsets")) - len(_ids(commits))
    if drain:
        query = _start(spark, path, settings, rows_per_batch, available_now=True)
        try:
            if not query.awaitTermination(max(60.0, timeout_s - seconds)):
                raise TimeoutError("the availableNow restart that drains the checkpoint did not end")
            if query.exception() is not None:
                raise RuntimeError(f"the availableNow restart failed: {query.exception()}")
        finally:
            query.stop()
    committed = _ids(commits)
    return {"batches_requested": batches, "batches_committed": len(committed),
            "last_batch_id": committed[-1] if committed else None, "query_id": query_id,
            "partitions": partitions, "rows_per_batch": rows_per_batch, "changelog": changelog,
            "seconds_to_target": round(reached, 3), "seconds": round(seconds, 3),
            "batches_per_s": round(done / reached, 2),
            "uncommitted_at_stop": interrupted, "drained": drain,
            "drain_s": round(time.perf_counter() - started - seconds, 3) if drain else 0.0,
            "files": count_files(path)}


def _start(spark: Any, path: Path, settings: dict[str, str], rows_per_batch: int, *, available_now: bool) -> Any:
    """Start the history query on ``path`` with ``settings``; the session's own values are restored on return."""
    from pyspark.sql import functions as F

    saved = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        events = (spark.readStream.format("rate-micro-batch")
                  # one input partition: a single cheap task before the shuffle into the state partitions;
                  # a fixed row count per batch, so every trigger is a batch (no empty polls)
                  .option("rowsPerBatch", rows_per_batch).option("numPartitions", 1)
                  .option("advanceMillisPerBatch", 1000).load())
        # ten keys per window: every state partition holds rows at every version (one window alone
        # hashes to one partition and leaves the other empty). The data is deterministic: the
        # source's timestamps start at 0 and advance 1 s per batch, whatever the wall clock.
        counts = (events.withWatermark("timestamp", "5 seconds")
                  .groupBy(F.window("timestamp", "10 seconds"), (F.col("value") % 10).alias("key")).count())
        writer = (counts.writeStream.format("noop").outputMode("update")
                  .queryName(f"rewind_history_{os.getpid()}_{time.monotonic_ns()}")
                  .option("checkpointLocation", str(path)))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
        # start() clones the session the query runs on, settings included, before it returns
        return writer.start()
    finally:
        _restore(spark, saved)


def _restore(spark: Any, saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def time_calls(calls: list[Callable[[], object]], runs: int) -> list[list[float]]:
    """Seconds per run of each call, interleaved (a, b, a, b, ...) after one warm-up each.

    Interleaving puts a burst of load from other processes on both sides of a comparison
    instead of on one of them, which matters on a shared 2-core machine.
    """
    for call in calls:
        call()
    out: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        for i, call in enumerate(calls):
            t0 = time.perf_counter()
            call()
            out[i].append(time.perf_counter() - t0)
    return out
