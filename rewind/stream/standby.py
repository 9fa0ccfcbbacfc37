"""A warm standby driver: pay the start-up before it is needed, take over when the driver dies.

``rewind stream run NAME --standby`` builds the Spark session, then warms it with a bounded read of
the stream's own source (the last record of each partition) through the stream's own transform:
that loads the Kafka connector's classes, starts the Python workers the transform uses and
compiles the plan's code. Then it blocks on the stream's driver lock
(``rewind.stream.driver_lock``); the kernel wakes it when the running driver's process is gone,
and it starts the query from the checkpoint as any relaunched driver would.

What a takeover still pays: the query's start (reading the offset and commit logs), loading the
state store, and the first batch. What it skips: JVM and session start-up, the connector's class
loading and the Python workers' start. ``bench/standby.py`` measures both against a cold start.

The warm-up reads and transforms a few records and writes nothing. A warm-up that fails (an empty
topic, a transform that cannot run on a batch read) is logged and the standby waits anyway: it
then pays that part of the start-up at takeover.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from rewind.registry import StreamSpec
from rewind.stream.driver_lock import DriverLock, mark_standby, read_holder, wait_for_driver_lock

log = logging.getLogger(__name__)

__all__ = ["become_driver", "warm_up"]


def _last_records(spec: StreamSpec, bootstrap: str) -> dict[Any, tuple[int, int]]:
    """[end - 1, end) of every partition of the stream's topics that has a record."""
    from rewind.kafka.client_config import stream_consumer_config
    from rewind.kafka.lookups import KafkaOffsetClient

    client = KafkaOffsetClient(stream_consumer_config(spec.source.options, bootstrap, f"rewind-standby-{spec.name}"),
                               30.0)
    try:
        tps = client.partitions(spec.topics)
        first, ends = client.earliest_offsets(tps), client.end_offsets(tps)
    finally:
        client.close()
    return {tp: (max(first[tp], ends[tp] - 1), ends[tp]) for tp in tps}


def warm_up(spark: Any, spec: StreamSpec, bootstrap: str) -> dict[str, Any]:
    """Run the stream's transform over the last record of each partition; returns what it did."""
    from rewind.stream.contract import load_transform
    from rewind.stream.outputs import output_frame
    from rewind.stream.source import bounded_options, bounded_read

    started = time.perf_counter()
    ranges = _last_records(spec, bootstrap)
    src = bounded_read(spark, spec, bounded_options(spec, bootstrap, list(spec.topics)), ranges)
    spark.sparkContext.setJobDescription(f"rewind standby warm-up of {spec.name} (nothing is written)")
    try:
        rows = output_frame(load_transform(spec), src, spec).toArrow().num_rows
    finally:
        spark.sparkContext.setJobDescription(None)
    return {"records": sum(e - s for s, e in ranges.values()), "rows_out": rows,
            "seconds": round(time.perf_counter() - started, 3)}


def become_driver(spark: Any, spec: StreamSpec, bootstrap: str, stop: threading.Event,
                  session_s: float) -> DriverLock | None:
    """Warm up, say so in ``<stream>.standby.json``, then wait for the driver lock (None: stopped)."""
    from rewind.stream.driver_lock import clear_standby

    try:
        warmed = warm_up(spark, spec, bootstrap)
        log.info("standby %s warmed up in %.1fs: %d record(s) through the transform, %d row(s) out (not written)",
                 spec.name, warmed["seconds"], warmed["records"], warmed["rows_out"])
    except Exception as exc:  # noqa: BLE001 - the standby is still worth having without it
        warmed = {"error": f"{type(exc).__name__}: {exc}"}
        log.warning("standby %s: the warm-up failed (%s); waiting anyway, the takeover will pay that start-up",
                    spec.name, warmed["error"])
    holder = read_holder(spec.status_dir, spec.name)
    mark_standby(spec.status_dir, spec.name, "ready", session_s + float(warmed.get("seconds", 0.0)), holder)
    log.info("standby %s ready (session %.1fs); waiting for the driver %s to end", spec.name, session_s,
             f"pid {holder.get('pid')}" if holder else "(none running now: taking over at once)")
    try:
        lock = wait_for_driver_lock(spec.status_dir, spec.name, stop)
    finally:
        clear_standby(spec.status_dir, spec.name)
    if lock is not None:
        log.warning("standby %s takes over: the driver's lock was freed %.1fs after the standby was ready",
                    spec.name, lock.waited_s)
    return lock
