"""Run one registered stream: Kafka source -> transform -> exactly-once sink.

The exactly-once chain: Spark records each batch's Kafka offsets in the
checkpoint's offset log before running it; after a crash it re-runs that batch
with the same id and the same offsets; the sink writes a batch and its ledger
row in one transaction and skips a batch id it has already committed.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from rewind import settings
from rewind.paths import late_checks_path, status_path
from rewind.registry import StreamSpec
from rewind.stream.batch_writer import BatchWriter, arrow_to_pandas
from rewind.stream.sink_factory import open_sink
from rewind.stream.source import check_source, source_options
from rewind.stream.status import StreamStatus, make_listener, write_status

__all__ = ["BatchWriter", "arrow_to_pandas", "build_query", "check_source", "open_sink", "run_stream", "source_options"]

log = logging.getLogger(__name__)
#: How long a stop request waits for the running batch to commit. Stopping mid-batch is safe
#: (the batch re-runs on restart and the sink skips what it already holds), just slower.
GRACEFUL_STOP_S = 20.0


def build_query(spark: Any, spec: StreamSpec, bootstrap: str, *, available_now: bool = False,
                checkpoint: str | None = None, phases: list[dict[str, Any]] | None = None,
                late: dict[int, tuple[int, int]] | None = None):
    """Wire source, transform and sink; return the started StreamingQuery (``phases``: see BatchWriter)."""
    from rewind.sink.delta_target import is_delta_url
    from rewind.stream.contract import load_transform
    from rewind.stream.outputs import output_frame
    from rewind.stream.spark_session import ensure_source, use_checkpoint_file_manager

    transform = load_transform(spec)
    sink = open_sink(spec, transform, spark)
    sink.create_tables()
    checkpoint = checkpoint or spec.checkpoint
    writer: BatchWriter
    if spec.sink.write_from == "executors" and is_delta_url(spec.sink.url):
        from rewind.stream.delta_writer import DeltaBatchWriter

        writer = DeltaBatchWriter(sink, transform.split, checkpoint, phases,
                                  late if late is not None else {}, spec=spec,
                                  dead_letter=transform.dead_letter_table)
    elif spec.sink.write_from == "executors":
        from rewind.stream.staged_writer import StagedBatchWriter

        writer = StagedBatchWriter(sink, transform.split, checkpoint, phases,
                                   late if late is not None else {}, spec=spec,
                                   dead_letter=transform.dead_letter_table)
    else:
        writer = BatchWriter(sink, transform.split, checkpoint, phases,
                             late if late is not None else {}, dead_letter=transform.dead_letter_table)
    use_checkpoint_file_manager(spark, checkpoint)
    ensure_source(spark, spec.source.format)
    source = spark.readStream.format(spec.source.format).options(**source_options(spec, bootstrap)).load()
    out = output_frame(transform, source, spec)
    ws = (out.writeStream.foreachBatch(writer).outputMode("append").queryName(spec.name)
          .option("checkpointLocation", checkpoint))
    ws = ws.trigger(availableNow=True) if available_now else ws.trigger(
        processingTime=f"{spec.durations()['trigger'].total_seconds()} seconds")
    return ws.start()


def run_stream(spec: StreamSpec, bootstrap: str, *, available_now: bool = False, master: str | None = None,
               standby: bool = False) -> int:
    """Run until the query ends or SIGTERM/SIGINT asks for a stop after the current batch.

    One driver per stream (``rewind.stream.driver_lock``). ``standby``: start and warm the session
    first, then wait for the running driver to end and take over (``rewind.stream.standby``)."""
    from rewind.stream.contract import load_transform
    from rewind.stream.driver_lock import acquire_driver_lock
    from rewind.stream.spark_session import build_session

    load_transform(spec)  # a transform that breaks the contract is refused before Spark starts
    check_source(spec, bootstrap)
    from rewind.platform.s3a import apply_credentials, is_url, s3a_conf

    if not is_url(spec.checkpoint):  # s3a://: Hadoop creates the "folders" (S3 has none)
        Path(spec.checkpoint).parent.mkdir(parents=True, exist_ok=True)
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping %s after the current batch", signum, spec.name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    lock = None if standby else acquire_driver_lock(spec.status_dir, spec.name)
    if standby:
        from rewind.stream.driver_lock import mark_standby

        mark_standby(spec.status_dir, spec.name, "warming")
    status = StreamStatus(stream=spec.name)
    if lock is not None:  # the supervisor sees the new pid before the session's start-up
        write_status(status_path(spec.status_dir, spec.name), status)
    started = time.perf_counter()
    spark = build_session(f"rewind-{spec.name}", master, conf={**s3a_conf(spec.checkpoint), **spec.spark_conf},
                          sources=False, defaults=driver_defaults_for(spec))
    try:
        apply_credentials(spark, spec.checkpoint)  # S3 keys on the Hadoop conf, never on a command line
        if lock is None:
            from rewind.stream.standby import become_driver

            lock = become_driver(spark, spec, bootstrap, stop_requested, time.perf_counter() - started)
            if lock is None:
                log.info("standby %s stopped before it was needed", spec.name)
                return 0
            status = StreamStatus(stream=spec.name)  # started now, as the driver
        return _drive(spark, spec, bootstrap, available_now, stop_requested, status)
    finally:
        if standby:
            from rewind.stream.driver_lock import clear_standby

            clear_standby(spec.status_dir, spec.name)
        spark.stop()
        if lock is not None:
            lock.release()


def _drive(spark: Any, spec: StreamSpec, bootstrap: str, available_now: bool, stop_requested: threading.Event,
           status: StreamStatus) -> int:
    """The driver's part once it holds the lock: status, listener, query, graceful stop."""
    spath = status_path(spec.status_dir, spec.name)
    late: dict[int, tuple[int, int]] = {}  # filled by the batch writer, checked when progress arrives
    late_log = late_checks_path(spath)
    group = group_offsets_for(spec, bootstrap)
    tracked = spark.conf.get("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "true") == "true"

    def on_progress(p: Any) -> None:
        from rewind.kafka.group_offsets import progress_end_offsets
        from rewind.stream.progress_metrics import progress_figures

        status.progress = progress_figures(p, tracked)
        record_late_check(status, late, p, late_log)
        if group is not None:  # after the batch committed: Kafka's tools see the stream's lag
            group.submit(progress_end_offsets(p))

    spark.streams.addListener(make_listener(spath, status, on_progress=on_progress))
    status.spark_ui = spark.sparkContext.uiWebUrl
    from rewind.stream.cluster_identity import cluster_of

    status.cluster = cluster_of(spark)  # on YARN: the application, so every host can ask the ResourceManager
    from rewind.checkpoints.pointer import active_checkpoint

    checkpoint = active_checkpoint(spec)  # a savepoint restore may have pointed the stream elsewhere
    seed_from_checkpoint(status, checkpoint)
    write_status(spath, status)
    query = build_query(spark, spec, bootstrap, available_now=available_now, checkpoint=checkpoint, late=late)
    log.info("stream %s started: query %s, checkpoint %s, sink %s, resuming after batch %s", spec.name, query.id,
             checkpoint, spec.sink.url.split("@")[-1], status.last_batch_id)
    probe = start_lag_probe(spec, bootstrap, status, spath)
    try:
        while query.isActive:
            if stop_requested.is_set():
                status.state = "stopping"
                write_status(spath, status)
                # Let the batch in flight commit (its progress event moves last_batch_id), then stop
                # before a backlog starts the next one; past the deadline, stop anyway.
                in_flight = status.last_batch_id
                deadline = time.monotonic() + GRACEFUL_STOP_S
                while (query.status.get("isTriggerActive") and status.last_batch_id == in_flight
                       and time.monotonic() < deadline):
                    time.sleep(0.1)
                query.stop()
                break
            query.awaitTermination(1)
        exc = query.exception()
        if exc is not None:
            status.state, status.exception = "failed", str(exc)
            write_status(spath, status)
            log.error("stream %s failed: %s", spec.name, exc)
            return 1
        status.state = "stopped"
        write_status(spath, status)
        return 0
    finally:
        probe.stop()


def driver_defaults_for(spec: StreamSpec) -> dict[str, str]:
    """A stream driver's Spark defaults: its UI on a free port, its event log beside the checkpoint
    (``rewind.stream.spark_conf.driver_defaults``; the deployment's settings win)."""
    from rewind.platform.processes import free_port
    from rewind.stream.spark_conf import driver_defaults, event_log_dir

    logs = event_log_dir(spec.checkpoint)
    if logs:
        Path(logs).mkdir(parents=True, exist_ok=True)  # Spark refuses an event log directory that is not there
    return driver_defaults(spec.checkpoint, free_port())


def group_offsets_for(spec: StreamSpec, bootstrap: str) -> Any:
    """The committer of the stream's consumer-group offsets (``rewind.kafka.group_offsets``), or None
    where the sink commits them in its own transaction (Kafka)."""
    from rewind.kafka.client_config import kafka_options, librdkafka_config
    from rewind.kafka.group_offsets import GroupOffsets, consumer_group
    from rewind.sink.kafka_target import is_kafka_url

    if is_kafka_url(spec.sink.url):
        return None
    client = {k: v for k, v in librdkafka_config(kafka_options(spec.source.options)).items()
              if k not in ("isolation.level", "group.id")}
    return GroupOffsets(bootstrap, client, consumer_group(spec.name))


def record_late_check(status: StreamStatus, late: dict[int, tuple[int, int]], progress: Any,
                      log_file: Path | None = None) -> None:
    """When a batch's progress arrives: its behind-the-watermark dead letters against Spark's own
    count of rows dropped by the watermark, logged, appended to ``log_file`` and kept in the status
    (a mismatch is an error)."""
    from rewind.stream.late_routing import check_progress

    check = check_progress(late, progress)
    if check is None:
        return
    if log_file is not None:
        with open(log_file, "a") as f:
            f.write(json.dumps({"batch": check.batch_id, "routed": check.routed, "dropped": list(check.dropped),
                                "watermark_ms": check.watermark_ms, "ok": check.ok, "t": round(time.time(), 3)})
                    + "\n")
    status.late_routed_total += check.routed
    status.late_check = {"batch": check.batch_id, "routed": check.routed, "dropped": list(check.dropped),
                         "watermark_ms": check.watermark_ms, "ok": check.ok}
    if not check.ok:
        status.late_mismatches = [*status.late_mismatches, status.late_check][-20:]
        log.error("%s", check.describe())
    elif check.routed:
        log.warning("%s", check.describe())


def seed_from_checkpoint(status: StreamStatus, checkpoint: str) -> None:
    """Start the status at the checkpoint's last committed batch and its offsets.

    Why: the supervisor tells a crash loop (failures that never get past the same batch) from
    progress by the last committed batch; a relaunched driver that fails before its first
    progress event must still report the batch it is stuck behind, not "none".
    """
    from rewind.checkpoints.inspection import CheckpointError, NotACheckpoint, inspect_checkpoint
    from rewind.checkpoints.store import is_s3_url, open_store

    try:
        if is_s3_url(checkpoint):
            from rewind.s3 import s3_client

            store = open_store(checkpoint, s3_client())
            if not store.exists():  # a first run: nothing written yet
                return
            report = inspect_checkpoint(store, recent=2)
        elif not (Path(checkpoint) / "commits").is_dir():
            return
        else:
            report = inspect_checkpoint(checkpoint, recent=2)
    except (CheckpointError, NotACheckpoint, OSError) as exc:
        log.warning("cannot read the last committed batch from %s: %s", checkpoint, exc)
        return
    if not report.committed:
        return
    last = report.committed[-1]
    info = report.batch(last)
    status.last_batch_id = last
    if info and info.offsets:
        status.end_offsets = {t: {str(p): int(o) for p, o in parts.items()} for t, parts in info.offsets[0].items()}


def start_lag_probe(spec: StreamSpec, bootstrap: str, status: StreamStatus, spath: Path) -> Any:
    """The Kafka lag look-up thread (REWIND_LAG_PROBE_S seconds apart, default 10; 0 turns it off)."""
    from rewind.kafka.client_config import stream_consumer_config
    from rewind.stream.lag_probe import LagProbe

    interval = settings.lag_probe_interval_s()
    probe = LagProbe(stream_consumer_config(spec.source.options, bootstrap, f"rewind-lag-{spec.name}"),
                     spec.topics, status, spath, interval_s=max(interval, 0.5))
    if interval > 0:
        probe.start()
    return probe
