"""A state rescale of the running demo, 2 -> 4 partitions, followed by kills, proven exactly once.

The crash scenario (``harness.crash``) runs the demo stream (Rewind's default: 2 state partitions)
while events flow; in its first run, after a committed batch, ``rewind checkpoint repartition``'s
library call stops it with a savepoint, repartitions a verified copy through Spark's offline
repartition in this process's session, inspects it and switches the stream to it; the stream is
started again on 4 partitions, SIGKILLed at random moments twice, caught up and proven: every Kafka
record once in the sink or its dead letters, every window total against a recomputation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.crash import run_crash_scenario
from harness.processes import StreamProcess, wait_for

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint
from rewind.paths import status_path
from rewind.registry import load_registry
from rewind.s3 import S3Config, S3Store
from rewind.stream.status import read_status

pytestmark = pytest.mark.slow


def test_a_repartition_2_to_4_of_the_demo_then_kills_stays_exactly_once(tmp_path: Path, platform: Any, spark: Any,
                                                                         new_topic: Any) -> None:
    from rewind.checkpoints.repartition import repartition
    from rewind.upgrade.history import read_history

    store = S3Store(S3Config.from_platform(platform))
    done: dict[str, Any] = {}

    def rescale(stream: StreamProcess, run: int) -> dict[str, Any] | None:
        if run != 1:
            return None
        spec = load_registry(stream.registry).get(stream.name)
        before = inspect_checkpoint(active_checkpoint(spec))
        assert {len(parts) for parts in before.operators.values()} == {2}, before.operators
        record = repartition(spec, store, 4, None, spark=spark)  # stops the driver after its batch
        assert record["result"] == "repartitioned", record
        assert not stream.alive()
        done.update(record=record, spec=spec)
        stream.start()
        rbatch = record["savepoint"]["batch_id"] + 1  # Spark's repartition batch
        spath = status_path(spec.status_dir, spec.name)
        wait_for(lambda: (st := read_status(spath)) is not None and st.pid == stream.pid and st.state == "running"
                 and (st.last_batch_id or -1) > rbatch and (st.last_batch_at or 0) >= st.started_at, 240,
                 "a batch on 4 state partitions", stream)
        return {"repartitioned": f"{record['from']['partitions']} -> 4", "savepoint": record["savepoint"]["id"]}

    summary = run_crash_scenario(tmp_path, platform, new_topic(3, "repart"), f"sqlite:///{tmp_path}/sink.db", "rp",
                                 events=9000, driver_kills=2, mid_run=rescale, produce_s=150.0)
    assert any(k.get("repartitioned") == "2 -> 4" for k in summary["kills"]), summary["kills"]
    spec, record = done["spec"], done["record"]
    after = inspect_checkpoint(active_checkpoint(spec), recent=10_000)
    assert active_checkpoint(spec) == record["checkpoint"] and not after.errors
    assert {len(parts) for parts in after.operators.values()} == {4}, after.operators
    batch = record["savepoint"]["batch_id"] + 1
    assert after.batch(batch) is not None and after.batch(batch).repartition  # type: ignore[union-attr]
    old = inspect_checkpoint(record["from"]["checkpoint"])  # kept for a rollback, on its 2 partitions
    assert old.last_complete == record["savepoint"]["batch_id"] and not old.errors
    assert {len(parts) for parts in old.operators.values()} == {2}
    assert [r["result"] for r in read_history(spec)] == ["repartitioned"]
