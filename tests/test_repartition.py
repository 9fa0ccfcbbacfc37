"""A state rescale 2 -> 4 of the demo stream while it runs, followed by kills, exactly once.

The same run is the SQL sink's crash proof (PostgreSQL, ``write_from: executors``: staged by the tasks,
committed by the driver; ``tests/harness/crash.py``): the first run dies between batch 2's pre-commit and
its commit, the next run's Python workers are SIGKILLed mid-write, then ``rewind checkpoint repartition``
stops it with a savepoint, repartitions a verified copy through Spark's offline repartition and switches,
and the driver is SIGKILLed once more on 4 state partitions, then a last run catches up on them;
``verify_stream`` checks every Kafka record against the sink and its dead letters and every window total
against a recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.crash import run_crash_scenario
from harness.processes import StreamProcess, wait_for

from rewind.control.status import read_status
from rewind.embedded.services import PlatformInfo
from rewind.paths import status_file
from rewind.registry import load_registry

pytestmark = pytest.mark.slow


def rescale_to_4(spark: Any, platform: PlatformInfo, done: dict[str, Any]
                 ) -> Callable[[StreamProcess, int], dict[str, Any] | None]:
    """``mid_run``: in the first randomly killed run, ``rewind checkpoint repartition``'s library call stops
    the stream with a savepoint, repartitions a verified copy 2 -> 4 through Spark's offline repartition
    in this process's session, inspects and switches; the stream starts again and commits on 4."""
    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.storage import S3Config, S3Storage
    from rewind.upgrade.repartition import repartition

    def rescale(stream: StreamProcess, run: int) -> dict[str, Any] | None:
        if done:
            return None
        spec = load_registry(stream.registry).get(stream.name)
        before = inspect_checkpoint(active_checkpoint(spec))
        assert {len(parts) for parts in before.operators.values()} == {2}, before.operators
        record = repartition(spec, S3Storage(S3Config.from_platform(platform)), 4, None, spark=spark)
        assert record["result"] == "repartitioned", record
        assert not stream.alive()  # it stopped the driver after its batch
        done.update(record=record, spec=spec)
        stream.start()
        rbatch = record["savepoint"]["batch_id"] + 1  # Spark's repartition batch
        spath = status_file(spec)
        wait_for(lambda: (st := read_status(spath)) is not None and st.pid == stream.pid and st.state == "running"
                 and (st.last_batch_id or -1) > rbatch and (st.last_batch_at or 0) >= st.started_at, 240,
                 "a batch on 4 state partitions", stream)
        return {"repartitioned": f"{record['from']['partitions']} -> 4", "savepoint": record["savepoint"]["id"]}

    return rescale


@pytest.mark.postgres
def test_exactly_once_under_sigkill_sql_sink_written_from_the_executors(tmp_path: Path, platform: PlatformInfo,
                                                                        new_topic, postgres_url: str, spark) -> None:
    """PostgreSQL, ``write_from: executors``: the tasks COPY each batch into staging tables, the driver
    moves them into the tables with the ledger row in one transaction (the first kill lands inside it).
    Then the stream's state is rescaled from 2 to 4 partitions while it runs (stop with a savepoint,
    Spark's offline repartition of a verified copy, inspected, switched), its driver SIGKILLed on 4
    partitions and a last run catches up on them: the rescale is proven exactly once under kills too.

    One random driver kill, not two (2026-11-28): the second was a whole run more (a launch, its first
    batch, its Python workers killed, a batch after) proving what the first had proven: a restart
    from the rescaled checkpoint after a SIGKILL."""
    import uuid

    from rewind.checkpoints.inspection import inspect_checkpoint
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.upgrade.history import read_history
    from tests.harness.pg_databases import create_database, drop_database

    db = f"crash_{uuid.uuid4().hex[:10]}"
    url = create_database(postgres_url, db)
    done: dict[str, Any] = {}
    try:
        summary = run_crash_scenario(tmp_path, platform, new_topic(3, "crashsql"), url, "crash_sql",
                                     precommit_kill_batch=2, write_from="executors", kill_workers=True,
                                     driver_kills=1, mid_run=rescale_to_4(spark, platform, done), produce_s=120.0)
    finally:
        drop_database(postgres_url, db)
    assert "killed_between_pre_commit_and_commit" in summary["kills"][0]
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
