"""The lag probe against a real broker: lag is Kafka's true end minus the last batch's end offsets,
and a stream that has data waiting but commits no batch is diagnosed as stalled."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rewind.control.status import StreamStatus, read_status
from rewind.demo.producer import ProduceSpec, produce
from rewind.driver.lag_probe import LagProbe
from rewind.kafka.client_config import base_consumer_config
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.supervision.health import Thresholds, diagnose


def test_probe_writes_true_lag_and_stall_is_detected(kafka_bootstrap: str, new_topic: Callable[..., str],
                                                     tmp_path: Path) -> None:
    topic = new_topic(partitions=2, prefix="lag")
    produce(kafka_bootstrap, ProduceSpec(topic=topic, count=300, partitions=2, id_prefix="l"))
    config = base_consumer_config(kafka_bootstrap)
    with KafkaOffsetClient(config, 30.0) as client:
        ends = client.end_offsets(client.partitions([topic]))
    assert sum(ends.values()) == 300
    # the stream committed a batch that ended 40 records into partition 0 and nothing of partition 1
    now = time.time()
    status = StreamStatus(stream="s", state="running", heartbeat=now, started_at=now - 600,
                          last_batch_id=3, last_batch_at=now - 500, end_offsets={topic: {"0": 40}})
    path = tmp_path / "s.json"
    probe = LagProbe(config, [topic], status, path)
    with KafkaOffsetClient(config, 30.0) as client:
        probe.probe_once(client)
    written = read_status(path)
    assert written is not None and written.lag_at is not None
    p0, p1 = ends[next(tp for tp in ends if tp.partition == 0)], ends[next(tp for tp in ends if tp.partition == 1)]
    assert written.lag == {f"{topic}/0": p0 - 40, f"{topic}/1": p1}
    assert written.total_lag == 300 - 40

    health = diagnose(written, time.time(), process_alive=True, t=Thresholds(stall_s=120))
    assert health.cause == "stalled" and "260 records waiting" in health.detail, health

    # caught up: the batch's end offsets equal Kafka's end -> lag 0, healthy however old the batch
    status.end_offsets = {topic: {str(tp.partition): o for tp, o in ends.items()}}
    with KafkaOffsetClient(config, 30.0) as client:
        probe.probe_once(client)
    written = read_status(path)
    assert written is not None and written.total_lag == 0
    assert diagnose(written, time.time(), process_alive=True).healthy


def test_probe_thread_runs_and_stops(kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(partitions=1, prefix="lagt")
    produce(kafka_bootstrap, ProduceSpec(topic=topic, count=50, partitions=1, id_prefix="t"))
    status = StreamStatus(stream="t", state="running")
    path = tmp_path / "t.json"
    probe = LagProbe(base_consumer_config(kafka_bootstrap), [topic], status, path, interval_s=0.3)
    probe.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (read_status(path) and read_status(path).total_lag == 50):
        time.sleep(0.2)
    probe.stop()
    probe.join(timeout=15)
    assert not probe.is_alive()
    st = read_status(path)
    assert st is not None and st.total_lag == 50 and st.latest_offsets == {topic: {"0": 50}}
