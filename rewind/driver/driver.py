"""The driver of one stream: take its lease, run its query, stop when asked, fenced, or failed.

The exactly-once chain: Spark records each batch's Kafka offsets in the checkpoint's offset log
before running it; after a crash it re-runs that batch with the same id and the same offsets; the
sink writes a batch and its ledger row in one transaction and skips a batch id it has already
committed. Across hosts one more link: the driver lease (``rewind.control.driver_lease``), whose
epoch fences the checkpoint writes (``rewind.driver.checkpoint_fence``), the sink's commits
(``Sink.fence``) and the status (``rewind.control.status_store``) of a driver that was taken over.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rewind.api.contract import load_transform
from rewind.checkpoints.pointer import active_checkpoint
from rewind.control.cluster_identity import cluster_of
from rewind.control.driver_lease import clear_standby, keep_standby_notice, take_driver_lease
from rewind.control.driver_lease import stop_requested as stop_request_of
from rewind.control.lease import fenced_line
from rewind.control.leases import LeaseKeeper, LeaseLost
from rewind.control.status import StreamStatus, await_last_progress, make_listener
from rewind.control.status_store import StoreChannel
from rewind.control.store import ControlStoreError
from rewind.driver.checkpoint_fence import fence as fence_checkpoint
from rewind.driver.checkpoint_fence import grant, withdraw
from rewind.driver.progress_metrics import progress_figures
from rewind.driver.runner import (
    build_query,
    delta_session,
    driver_defaults_for,
    group_offsets_for,
    record_late_check,
    seed_from_checkpoint,
    start_lag_probe,
)
from rewind.driver.source import check_source
from rewind.driver.spark_session import build_session
from rewind.driver.standby import become_driver
from rewind.driver.startup import StartupSpans
from rewind.kafka.group_offsets import progress_end_offsets
from rewind.lineage.entry import stream_lineage
from rewind.paths import late_checks_path, status_file
from rewind.registry import StreamSpec
from rewind.runtime.s3a import apply_credentials, is_url, s3a_conf

__all__ = ["GRACEFUL_STOP_S", "run_stream"]

log = logging.getLogger(__name__)
#: How long a stop request waits for the running batch to commit. Stopping mid-batch is safe
#: (the batch re-runs on restart and the sink skips what it already holds), just slower.
GRACEFUL_STOP_S = 20.0
LAST_PROGRESS_S = 10.0  # the last batch's progress to reach the status and the consumer group, on stop


def run_stream(spec: StreamSpec, bootstrap: str, *, available_now: bool = False, master: str | None = None,
               standby: bool = False) -> int:
    """Run until the query ends or SIGTERM/SIGINT (or a stop request) asks for a stop after the current batch.

    One driver per stream, on any host: the stream's lease (``rewind.control.driver_lease``), taken
    before the Spark session starts and released when the driver ends, whatever ended it.
    ``standby``: start and warm the session first, then wait for the lease and take over
    (``rewind.driver.standby``). A driver whose lease is taken over stops, having committed nothing
    more, and raises ``LeaseLost`` ("fenced: epoch N was taken over by epoch M on HOST", exit 3)."""

    spans = StartupSpans.now()
    spans.mark("python")  # the interpreter, its imports and the registry
    load_transform(spec)  # a transform that breaks the contract is refused before Spark starts
    check_source(spec, bootstrap)
    spans.mark("checks")

    if not is_url(spec.checkpoint):  # s3a://: Hadoop creates the "folders" (S3 has none)
        Path(spec.checkpoint).parent.mkdir(parents=True, exist_ok=True)
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping %s after the current batch", signum, spec.name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    keeper = None if standby else take_driver_lease(spec)
    warmed = threading.Event()
    if keeper is not None:  # the supervisor sees the new driver before the session's start-up
        StoreChannel(keeper.store, keeper.epoch).write(driver_status(spec, keeper))
        spans.mark("lease")
    else:
        keep_standby_notice(spec, warmed)  # "warming", renewed until the wait for the lease begins
    started = time.perf_counter()
    spark = None
    try:
        spark = build_session(f"rewind-{spec.name}", master, conf={**s3a_conf(spec.checkpoint), **spec.spark_conf},
                              sources=False, defaults=driver_defaults_for(spec),
                              delta=delta_session(spec), jdbc=spec.real_time is not None)
        apply_credentials(spark, spec.checkpoint)  # S3 keys on the Hadoop conf, never on a command line
        spans.mark("session")
        if keeper is None:

            keeper = become_driver(spark, spec, bootstrap, stop_requested, time.perf_counter() - started, warmed)
            if keeper is None:
                log.info("standby %s stopped before it was needed", spec.name)
                return 0
            spans.mark("standby")  # the warm-up and the wait for the lease
        return _drive(spark, spec, bootstrap, available_now, stop_requested, keeper, spans)
    finally:
        warmed.set()
        if standby:
            clear_standby(spec)
        if keeper is not None:
            keeper.release()  # a successor takes the stream over at once
        if spark is not None:
            stop_session(spark)


def driver_status(spec: StreamSpec, keeper: LeaseKeeper) -> StreamStatus:
    """A new driver's first status: its epoch and where its pid means something."""
    return StreamStatus(stream=spec.name, epoch=keeper.epoch, host=keeper.lease.holder.host,
                        holder=asdict(keeper.lease.holder))


def stop_session(spark: Any, timeout_s: float = 60.0) -> None:
    """``spark.stop()``, bounded: a driver whose query failed must exit, releasing what it holds, even
    when the JVM does not stop (then the process ends here, exit 1)."""
    def give_up() -> None:
        log.error("Spark did not stop within %.0fs: exiting", timeout_s)
        os._exit(1)

    watchdog = threading.Timer(timeout_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        spark.stop()
    finally:
        watchdog.cancel()


def _drive(spark: Any, spec: StreamSpec, bootstrap: str, available_now: bool, stop_requested: threading.Event,
           keeper: LeaseKeeper, spans: StartupSpans) -> int:
    """The driver's part once it holds the lease: status, listener, query, graceful stop; a takeover
    (``keeper.fenced``) stops the query at once."""

    channel = StoreChannel(keeper.store, keeper.epoch)
    status = driver_status(spec, keeper)
    keeper.on_fenced.append(lambda _line: stop_requested.set())
    late: dict[int, tuple[int, int]] = {}  # filled by the batch writer, checked when progress arrives
    late_log = late_checks_path(status_file(spec))
    late_log.parent.mkdir(parents=True, exist_ok=True)
    group = group_offsets_for(spec, bootstrap)
    tracked = spark.conf.get("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "true") == "true"

    def on_progress(p: Any) -> None:

        if not status.startup:  # the first batch is in: the start-up's split, once
            spans.mark("first_batch")
            status.startup = spans.spans()
            log.info(spans.line(spec.name))
        status.progress = progress_figures(p, tracked)
        lineage.progress(p)
        record_late_check(status, late, p, late_log)
        if group is not None:  # after the batch committed: Kafka's tools see the stream's lag
            group.submit(progress_end_offsets(p))

    # OpenLineage (rewind.lineage): the run is the lease's driver id; nothing at all without a transport
    lineage = stream_lineage(spec, bootstrap, spark, keeper.lease.holder.driver_id)
    listener = make_listener(channel, status, on_progress=on_progress)
    spark.streams.addListener(listener)
    status.spark_ui = spark.sparkContext.uiWebUrl

    status.cluster = cluster_of(spark)  # on YARN: the application, so every host can ask the ResourceManager
    checkpoint = active_checkpoint(spec)  # a savepoint restore may have pointed the stream elsewhere
    grant(spark, checkpoint, keeper)
    keeper.on_tick.append(lambda: answer_stop_request(spec, keeper, stop_requested,
                                                      lambda why: fence_checkpoint(spark, checkpoint, why)))
    seed_from_checkpoint(status, checkpoint)
    channel.write(status)
    try:
        query = build_query(spark, spec, bootstrap, available_now=available_now, checkpoint=checkpoint, late=late,
                            lease=keeper, lineage=lineage)
        lineage.start()
        channel.epoch = status.epoch = keeper.epoch  # raised past a sink fenced under another store, if it was
        spans.mark("query")
        log.info("stream %s started: query %s, checkpoint %s, sink %s, lease epoch %d, resuming after batch %s",
                 spec.name, query.id, checkpoint, spec.sink.url.split("@")[-1], keeper.epoch, status.last_batch_id)
        refused: list[str] = []  # a real-time stream whose topics gained partitions past its task slots
        probe = start_lag_probe(spec, bootstrap, status, channel, _partitions_guard(spark, spec, stop_requested,
                                                                                    refused))
        try:

            def settle() -> None:  # the status and the consumer group end where the stream did
                await_last_progress(query, listener, LAST_PROGRESS_S)
                if group is not None:
                    group.flush(LAST_PROGRESS_S)

            result = _until_stopped(query, spec, keeper, stop_requested, status, channel, settle)
        finally:
            probe.stop()
        if refused:
            from rewind.driver.realtime import RealTimeRefused  # lazy: only real-time streams

            status.state, status.exception = "failed", refused[0]
            channel.write(status)
            raise RealTimeRefused(refused[0])
    except BaseException as exc:
        lineage.end(1, str(exc) if isinstance(exc, LeaseLost) else _fenced(keeper), exc)
        raise
    finally:
        withdraw(spark, checkpoint)
    lineage.end(result, _fenced(keeper), status.exception if result else None)
    if keeper.fenced.is_set():
        raise LeaseLost(fenced_line(keeper.lease, keeper.fenced_by))
    return result


def _partitions_guard(spark: Any, spec: StreamSpec, stop: threading.Event, said: list[str]) -> Any:
    """The real-time mode's guard against partitions added past the task slots, for the lag probe; else None."""
    if spec.real_time is None:
        return None
    from rewind.driver.realtime import partitions_guard  # lazy: only real-time streams

    return partitions_guard(spark, spec, stop, said)


def _fenced(keeper: LeaseKeeper) -> str | None:
    """Why the driver was fenced (another took the stream over), or None."""
    return fenced_line(keeper.lease, keeper.fenced_by) if keeper.fenced.is_set() else None


def answer_stop_request(spec: StreamSpec, keeper: LeaseKeeper, stop_requested: threading.Event,
                        fence: Any) -> None:
    """From the lease's thread: a stop requested from any host (``rewind.control.driver_lease.request_stop``)
    stops the driver after its batch in flight; a forced one (a hung driver) at once: its checkpoint
    writes are fenced and its lease released, so a new driver may start whatever this one still does,
    and the process ends if it has not within a grace period."""

    asked = stop_request_of(keeper.store, keeper.epoch)
    if asked is None or stop_requested.is_set() and not asked.get("force"):
        return
    log.warning("stream %s: stop requested from %s: %s", spec.name, asked.get("by"), asked.get("reason"))
    stop_requested.set()
    if asked.get("force"):
        fence(f"stopped by a forced stop request from {asked.get('by')}")
        keeper.release()
        watchdog = threading.Timer(GRACEFUL_STOP_S + 10, os._exit, [1])
        watchdog.daemon = True
        watchdog.start()


def _until_stopped(query: Any, spec: StreamSpec, keeper: LeaseKeeper, stop_requested: threading.Event,
                   status: StreamStatus, channel: StoreChannel, settle: Callable[[], None]) -> int:
    """Run until stopped, failed or fenced; ``settle`` runs before the final status is written."""
    while query.isActive:
        if keeper.fenced.is_set():
            query.stop()  # nothing of the batch in flight may commit
            break
        if stop_requested.is_set():
            status.state = "stopping"
            channel.write(status)
            # Let the batch in flight commit (its progress event moves last_batch_id), then stop
            # before a backlog starts the next one; past the deadline, stop anyway.
            in_flight = status.last_batch_id
            deadline = time.monotonic() + GRACEFUL_STOP_S
            while (query.status.get("isTriggerActive") and status.last_batch_id == in_flight
                   and time.monotonic() < deadline and not keeper.fenced.is_set()):
                time.sleep(0.1)
            query.stop()
            break
        try:
            query.awaitTermination(1)
        except Exception:  # noqa: BLE001 - pyspark raises the query's failure here; it is read below
            break
    exc = query.exception()
    if exc is not None and not keeper.fenced.is_set():
        try:  # a query that failed after a pause (its writes refused past the lease): was it taken over?
            keeper.renew()
        except ControlStoreError:
            pass
    if keeper.fenced.is_set():
        return 1  # the caller says why, in one line
    settle()
    if exc is not None:
        status.state, status.exception = "failed", str(exc)
        channel.write(status)
        log.error("stream %s failed: %s", spec.name, exc)
        return 1
    status.state = "stopped"
    channel.write(status)
    return 0
