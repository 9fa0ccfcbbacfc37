"""Kafka lag of a running stream, looked up beside the query and written into its status.

Why: Spark's progress events report the latest offsets only when a batch runs (and not at all
for a Python data source), so they cannot say how far behind a stream is while no batch comes,
and "stalled" (Kafka has data, no batch comes) would be invisible. A daemon thread in the driver
asks Kafka for the end of every partition (one ListOffsets request, with the stream's own
``kafka.*`` options) every few seconds and updates ``latest_offsets``/``lag``, whichever source
the stream reads with. It never touches the heartbeat: a hung query with a live probe still
shows as stalled, a hung driver as a stale heartbeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewind.control.status import StatusChannel, StreamStatus, channel_of, lag_of
from rewind.kafka.lookups import KafkaOffsetClient

log = logging.getLogger(__name__)


def end_offsets_json(ends: dict[Any, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, off in ends.items():
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(off)
    return out


class LagProbe(threading.Thread):
    """Every `interval_s`: true end offsets of the stream's topics -> status lag (until `stop`)."""

    def __init__(self, consumer_config: dict[str, Any], topics: list[str], status: StreamStatus,
                 target: Path | StatusChannel, interval_s: float = 10.0, timeout_s: float = 30.0,
                 on_partitions: Callable[[int], None] | None = None) -> None:
        super().__init__(name=f"lag-probe-{status.stream}", daemon=True)
        self.config, self.topics, self.status = consumer_config, topics, status
        self.on_partitions = on_partitions  # told how many partitions the topics have, at every look-up
        self.channel = channel_of(target)
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def probe_once(self, client: Any) -> None:
        partitions = client.partitions(self.topics)
        if self.on_partitions is not None:
            self.on_partitions(len(partitions))
        ends = client.end_offsets(partitions)
        latest = end_offsets_json(ends)
        st = self.status
        if st.state in ("stopped", "failed"):
            return
        st.latest_offsets = latest
        st.lag = lag_of(st.end_offsets, latest)
        st.total_lag = sum(st.lag.values())
        st.lag_at = time.time()
        self.channel.write(st)
        self.channel.sample(st)

    def run(self) -> None:

        warned = False
        with KafkaOffsetClient(self.config, self.timeout_s) as client:
            while not self.stopped.wait(self.interval_s):
                try:
                    self.probe_once(client)
                    if warned:  # say so, or a log read later shows a failure that never ended
                        log.info("lag look-up works again")
                    warned = False
                except Exception as exc:  # noqa: BLE001 - a broker hiccup must not end the stream
                    if not warned:
                        log.warning("lag look-up failed (will retry every %.0fs): %s", self.interval_s, exc)
                        warned = True
