"""A warm standby driver: pay the start-up before it is needed, take over when the driver dies.

``rewind stream run NAME --standby`` builds the Spark session, then warms it with a bounded read of
the stream's own source (the last record of each partition) through the stream's own transform:
that loads the Kafka connector's classes, starts the Python workers the transform uses and
compiles the plan's code. Then it waits for the stream's driver lease
(``rewind.control.driver_lease``) and takes it with the next epoch when the driver released it,
when its lease lapsed (a driver on another host: no kernel tells this one), or at once when the
driver ran on this host and its process is gone; then it starts the query from the checkpoint as
any relaunched driver would.

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

from rewind.api.contract import load_transform
from rewind.control.driver_lease import clear_standby, wait_for_takeover
from rewind.control.lease import describe
from rewind.control.leases import LeaseKeeper, read_lease
from rewind.control.location import control_store
from rewind.driver.outputs import output_frame
from rewind.driver.source import bounded_options, bounded_read
from rewind.kafka.client_config import stream_consumer_config
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.registry import StreamSpec

log = logging.getLogger(__name__)

__all__ = ["become_driver", "warm_up"]


def _last_records(spec: StreamSpec, bootstrap: str) -> dict[Any, tuple[int, int]]:
    """[end - 1, end) of every partition of the stream's topics that has a record."""

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
                  session_s: float, warm_done: threading.Event | None = None) -> LeaseKeeper | None:
    """Warm up, say so in the ``standby`` document, then wait for the lease (None: stopped first).
    ``warm_done`` is set once the warm-up is over (it ends the renewal of the "warming" notice)."""
    try:
        warmed = warm_up(spark, spec, bootstrap)
        log.info("standby %s warmed up in %.1fs: %d record(s) through the transform, %d row(s) out (not written)",
                 spec.name, warmed["seconds"], warmed["records"], warmed["rows_out"])
    except Exception as exc:  # noqa: BLE001 - the standby is still worth having without it
        warmed = {"error": f"{type(exc).__name__}: {exc}"}
        log.warning("standby %s: the warm-up failed (%s); waiting anyway, the takeover will pay that start-up",
                    spec.name, warmed["error"])
    if warm_done is not None:
        warm_done.set()
    holder = read_lease(control_store(spec))[0]
    warm_up_s = session_s + float(warmed.get("seconds", 0.0))
    # a stop requested since this standby began (while it warmed up) stops it too
    notice = {"state": "ready", "warm_up_s": warm_up_s, "since": time.time() - warm_up_s - 1.0}
    log.info("standby %s ready (session %.1fs); waiting for the driver %s", spec.name, session_s,
             describe(holder) if holder else "(none running now: taking over at once)")
    waited = time.monotonic()
    try:
        keeper = wait_for_takeover(spec, stop, notice)
    finally:
        clear_standby(spec)
    if keeper is not None:
        log.warning("standby %s takes over with epoch %d, %.1fs after it was ready", spec.name, keeper.epoch,
                    time.monotonic() - waited)
    return keeper
