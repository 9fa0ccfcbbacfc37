"""Wire one registered stream: Kafka source -> transform -> exactly-once sink (the driver: ``rewind.driver.driver``).

The exactly-once chain: Spark records each batch's Kafka offsets in the
checkpoint's offset log before running it; after a crash it re-runs that batch
with the same id and the same offsets; the sink writes a batch and its ledger
row in one transaction and skips a batch id it has already committed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewind import settings
from rewind.api.contract import check_late_candidates, load_transform
from rewind.checkpoints.inspection import CheckpointError, NotACheckpoint, inspect_checkpoint
from rewind.control.leases import LeaseKeeper
from rewind.control.status import StatusChannel, StreamStatus
from rewind.driver import python_daemon
from rewind.driver.batch_writer import BatchWriter, arrow_to_pandas
from rewind.driver.delta_writer import DeltaBatchWriter
from rewind.driver.initial_offsets import pinned_options
from rewind.driver.interruption import stop_aware
from rewind.driver.lag_probe import LagProbe
from rewind.driver.late_routing import check_progress, late_candidate_fields
from rewind.driver.outputs import output_frame, resolve_from_output, tagged
from rewind.driver.scratch import driver_local_dir
from rewind.driver.sink_factory import open_sink
from rewind.driver.source import check_source, source_options
from rewind.driver.spark_conf import driver_defaults
from rewind.driver.spark_session import deployment_conf, ensure_source, use_checkpoint_file_manager
from rewind.driver.staged_writer import StagedBatchWriter
from rewind.kafka.client_config import kafka_options, librdkafka_config, stream_consumer_config
from rewind.kafka.group_offsets import GroupOffsets, consumer_group
from rewind.lineage.config import Lineage
from rewind.registry import StreamSpec
from rewind.runtime.processes import free_port
from rewind.sink.delta_target import needs_delta_spark
from rewind.sink.errors import SinkFenced
from rewind.sink.kafka_target import is_kafka_url
from rewind.storage.location import open_storage

__all__ = ["BatchWriter", "arrow_to_pandas", "build_query", "check_source", "open_sink", "source_options"]

log = logging.getLogger(__name__)


def build_query(spark: Any, spec: StreamSpec, bootstrap: str, *, available_now: bool = False,
                checkpoint: str | None = None, phases: list[dict[str, Any]] | None = None,
                late: dict[int, tuple[int, int]] | None = None, lease: LeaseKeeper | None = None,
                lineage: Lineage | None = None):
    """Wire source, transform and sink; return the started StreamingQuery (``phases``: see BatchWriter).

    ``lease``: the driver's lease. The sink is fenced at its epoch before the query starts (a driver
    it took over from commits nothing more), and every batch checks it before its commit. ``lineage``
    (``rewind.lineage``) is told the sink's tables and each batch's rows per table."""

    transform = load_transform(spec)
    lineage = lineage or Lineage()
    if spec.real_time is not None:
        return _real_time_query(spark, spec, transform, bootstrap, checkpoint or spec.checkpoint, lease, lineage)
    checkpoint = checkpoint or spec.checkpoint
    # build() runs once, over the stream's own source: its output gives the tables' columns, the late
    # candidates' check and the query (Spark analyses each plan it is given: cold, about 0.7 s a plan)
    built = transform.build(_source(spark, spec, bootstrap, checkpoint), spec)
    late_fields = late_candidate_fields(built)
    resolve_from_output(transform, spec, built, late_fields)  # columns left to the output, and their checks
    sink = open_sink(spec, transform, spark)
    lineage.outputs(sink.specs.values())
    if all(t.resolved for t in transform.tables) and late_fields is not None:
        # refused before the first batch, not when a late record arrives
        check_late_candidates(transform, tuple(sink.specs.values()), late_fields,
                              f"stream {spec.name}: transform {spec.transform!r}")
    sink.create_tables()
    if lease is not None:
        fence_sink(sink, lease)
    writer: BatchWriter
    if delta_session(spec):

        writer = DeltaBatchWriter(sink, transform.split, checkpoint, phases,
                                  late if late is not None else {}, spec=spec,
                                  dead_letter=transform.dead_letter_table)
    elif spec.sink.write_from == "executors":

        writer = StagedBatchWriter(sink, transform.split, checkpoint, phases,
                                   late if late is not None else {}, spec=spec,
                                   dead_letter=transform.dead_letter_table)
    else:
        writer = BatchWriter(sink, transform.split, checkpoint, phases,
                             late if late is not None else {}, dead_letter=transform.dead_letter_table)
    writer.on_rows = lineage.rows
    if lease is not None:
        writer.lease_check = lease.check
        lease.check("the stream's first batch")  # the new driver plans nothing while it is not the holder
    out = tagged(transform, built)
    ws = (out.writeStream.foreachBatch(stop_aware(writer)).outputMode("append").queryName(spec.name)
          .option("checkpointLocation", checkpoint))
    ws = ws.trigger(availableNow=True) if available_now else ws.trigger(
        processingTime=f"{spec.durations()['trigger'].total_seconds()} seconds")
    return ws.start()


def _real_time_query(spark: Any, spec: StreamSpec, transform: Any, bootstrap: str, checkpoint: str,
                     lease: LeaseKeeper | None, lineage: Lineage) -> Any:
    """``build_query`` in Spark's real-time mode (``rewind.driver.realtime``): refused before anything is
    written when the sink, the declarations or the plan do not allow it."""
    from rewind.driver import realtime  # lazy: only real-time streams

    realtime.check_stream(spec, transform)
    out = _output(spark, spec, transform, bootstrap, checkpoint)
    realtime.check_plan(spec, out)
    partitions = realtime.check_slots(spark, spec, bootstrap)
    sink = open_sink(spec, transform, spark)
    sink.create_tables()
    lineage.outputs(sink.specs.values())
    if lease is not None:
        fence_sink(sink, lease)
        lease.check("the stream's first epoch")
    return realtime.start_query(spark, spec, transform, sink, out, checkpoint, lease.epoch if lease else 0,
                                partitions)


def _output(spark: Any, spec: StreamSpec, transform: Any, bootstrap: str, checkpoint: str) -> Any:
    """The stream's Kafka source read through the transform (the checkpoint written through Rewind's manager)."""
    return output_frame(transform, _source(spark, spec, bootstrap, checkpoint), spec)


def _source(spark: Any, spec: StreamSpec, bootstrap: str, checkpoint: str) -> Any:
    """The stream's Kafka source as a streaming DataFrame (the checkpoint written through Rewind's manager)."""
    use_checkpoint_file_manager(spark, checkpoint)
    ensure_source(spark, spec.source.format)
    options = pinned_options(spec.name, spec.source.format, source_options(spec, bootstrap), checkpoint)
    return spark.readStream.format(spec.source.format).options(**options).load()


def fence_sink(sink: Any, lease: LeaseKeeper) -> None:
    """Fence the sink at the new driver's epoch before its first batch (a driver it took over from commits
    nothing more). A sink that holds a higher epoch than the lease's own store has seen was written under
    another store (the stream moved between stores through a savepoint, or its store was wiped): the lease,
    still this driver's, is raised above it (``LeaseKeeper.advance``)."""

    try:
        sink.fence(lease.epoch)
    except SinkFenced as exc:
        if exc.newer is None:
            raise
        lease.advance(exc.newer + 1, f"the sink was fenced at epoch {exc.newer} under another control store "
                                     f"than {lease.store.where}")
        sink.fence(lease.epoch)


def driver_defaults_for(spec: StreamSpec) -> dict[str, str]:
    """A stream driver's Spark defaults: its UI on a free port, its own scratch space (``rewind.driver.scratch``),
    its transform's module for the Python daemon to import (``rewind.driver.python_daemon``) and, where the
    deployment or the registry turned the event log on without a directory, that directory beside the
    checkpoint (``rewind.driver.spark_conf.driver_defaults``; the deployment's settings win)."""

    asked = {**deployment_conf(), **spec.spark_conf}
    defaults = driver_defaults(spec.checkpoint, free_port(), asked)
    # Rewind's Python daemon (local masters) imports the transform's module before it forks the workers
    defaults[f"spark.executorEnv.{python_daemon.ENV}"] = spec.transform.partition(":")[0]
    local_dir = driver_local_dir(spec.name, asked)  # swept when the next driver starts: a SIGKILL leaves it
    if local_dir:
        defaults["spark.local.dir"] = local_dir
    if "spark.eventLog.dir" in defaults and "spark.eventLog.dir" not in asked:
        # Spark refuses an event log directory that is not there
        Path(defaults["spark.eventLog.dir"]).mkdir(parents=True, exist_ok=True)
    return defaults


def delta_session(spec: StreamSpec) -> bool:
    """Whether the stream's session needs delta-spark (``build_session(delta=...)``): a Delta sink written
    from the executors (``DeltaBatchWriter``); delta-rs writes it otherwise."""
    return needs_delta_spark(spec.sink.url, spec.sink.write_from)


def group_offsets_for(spec: StreamSpec, bootstrap: str) -> Any:
    """The committer of the stream's consumer-group offsets (``rewind.kafka.group_offsets``), or None
    where the sink commits them in its own transaction (Kafka)."""

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

    try:
        store = open_storage(checkpoint)
        if not store.list_dir("commits")[1]:  # a first run: nothing committed yet
            return
        report = inspect_checkpoint(store, recent=2)
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


def start_lag_probe(spec: StreamSpec, bootstrap: str, status: StreamStatus, channel: StatusChannel,
                    on_partitions: Callable[[int], None] | None = None) -> Any:
    """The Kafka lag look-up thread (REWIND_LAG_PROBE_S seconds apart, default 10; 0 turns it off)."""

    interval = settings.lag_probe_interval_s()
    probe = LagProbe(stream_consumer_config(spec.source.options, bootstrap, f"rewind-lag-{spec.name}"),
                     spec.topics, status, channel, interval_s=max(interval, 0.5), on_partitions=on_partitions)
    if interval > 0:
        probe.start()
    return probe
