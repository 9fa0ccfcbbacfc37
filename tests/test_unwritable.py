"""Rows a sink cannot take become dead letters and the batch commits (``rewind.sink.unwritable``),
through the driver path's ``BatchWriter.write``, on real SQLite and Delta sinks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.demo.tables import TABLES
from rewind.driver.batch_writer import BatchWriter
from rewind.sink.delta import DeltaSink
from rewind.sink.delta_target import DeltaSinkTarget
from rewind.sink.errors import SinkRefused
from rewind.sink.sql import ExactlyOnceSqlSink


def events(n: int, partitions: int = 4) -> pd.DataFrame:
    t0 = pd.Timestamp("2026-11-24T10:00:00Z")
    return pd.DataFrame({
        "event_id": [f"e{i}" for i in range(n)], "key": [f"k{i % 5}" for i in range(n)],
        "amount": pd.Series([float(i) for i in range(n)], dtype=object),
        "event_time": pd.Series([t0 + pd.Timedelta(seconds=i) for i in range(n)], dtype=object),
        "topic": "orders", "partition": pd.array([i % partitions for i in range(n)], dtype="Int32"),
        "offset": pd.array(range(100, 100 + n), dtype="Int64"), "kafka_timestamp": t0,
        "batch_id": pd.array([3] * n, dtype="Int64")})


@pytest.fixture(params=["sqlite", "delta"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/s.db", "u", TABLES) if request.param == "sqlite" else \
        DeltaSink(DeltaSinkTarget(str(tmp_path / "lake")), "u", TABLES)
    yield made
    made.dispose()


def test_rows_with_values_their_columns_refuse_become_dead_letters(sink: Any) -> None:
    batch = events(40)
    batch.loc[7, "amount"] = "twelve"  # not a double
    batch.loc[21, "event_time"] = "not a time"
    batch.loc[30, "event_id"] = None  # a key column without a value
    writer = BatchWriter(sink, lambda f, b: f, dead_letter="dead_letter")
    result = writer.write(3, {"events": batch, "dead_letter": batch.iloc[0:0][["topic", "partition", "offset"]]})
    assert not result.skipped and sink.committed_batch_ids() == [3]
    ev, dead = sink.read_table("events"), sink.read_table("dead_letter")
    assert len(ev) == 37 and set(dead["offset"]) == {107, 121, 130}
    assert set(ev["offset"]) | set(dead["offset"]) == set(range(100, 140)), "every record is somewhere"
    why = dict(zip(dead["offset"], dead["reason"]))
    assert why[107].startswith("unwritable_value: table 'events', column 'amount'") and "twelve" in why[107]
    assert "'event_time'" in why[121] and "no value for a key column" in why[130]
    assert dead["batch_id"].tolist() == [3, 3, 3]


def test_rows_without_coordinates_or_without_a_dead_letter_table_are_still_refused(sink: Any) -> None:
    windows = pd.DataFrame({"window_start": [pd.Timestamp("2026-11-24T10:00:00Z")],
                            "window_end": [pd.Timestamp("2026-11-24T10:00:05Z")], "key": ["k"],
                            "event_count": pd.Series(["many"], dtype=object), "amount_sum": [1.0], "batch_id": [1]})
    with pytest.raises(SinkRefused, match="event_count"):
        BatchWriter(sink, lambda f, b: f, dead_letter="dead_letter").write(1, {"window_results": windows})
    bad = events(3)
    bad.loc[1, "amount"] = "x"
    with pytest.raises(SinkRefused, match="amount"):
        BatchWriter(sink, lambda f, b: f).write(1, {"events": bad})
    assert sink.committed_batch_ids() == [] and sink.read_table("events").empty, "nothing was written"


def test_the_executor_writer_routes_the_same_rows_in_its_tasks() -> None:
    """``delta_writer._prepared`` is what every Spark task of a Delta batch runs on its rows."""
    from types import SimpleNamespace

    from rewind.driver.delta_writer import _prepared

    batch = events(12)
    batch.loc[4, "amount"] = "n/a"
    tables = {"events": batch, "dead_letter": batch.iloc[0:0][["topic", "partition", "offset"]]}
    out = dict(_prepared(SimpleNamespace(dead_letter_table="dead_letter"), list(TABLES), tables, 9))
    assert out["events"].num_rows == 11 and out["dead_letter"].column("offset").to_pylist() == [104]
    why = out["dead_letter"].column("reason")[0].as_py()
    assert why.startswith("unwritable_value: table 'events', column 'amount'")
    with pytest.raises(SinkRefused, match="amount"):
        _prepared(SimpleNamespace(dead_letter_table=None), list(TABLES), tables, 9)


def test_the_staging_tasks_stage_the_same_rows_as_dead_letters(tmp_path: Path) -> None:
    """``staged_writer._stage`` is what a task of ``write_from: executors`` on SQL runs per table."""
    from types import SimpleNamespace

    from rewind.driver.staged_writer import StageTask, _stage
    from rewind.sink.staging import SqlStaging

    sink = ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/st.db", "u", TABLES)
    staging = SqlStaging(sink)
    staging.create()
    batch = events(10)
    batch.loc[6, "event_time"] = "yesterday"
    task = StageTask(None, 5, "5-a", None)
    done = dict(_stage(staging, SimpleNamespace(dead_letter_table="dead_letter"), "events", batch, task, 0))
    assert done == {"events": (9, 9), "dead_letter": (1, 1)}
    staging.commit(5, "5-a", {"events": 9, "dead_letter": 1}, {"events": 9, "dead_letter": 1}, None)
    assert len(sink.read_table("events")) == 9 and sink.read_table("dead_letter")["offset"].tolist() == [106]
    sink.dispose()
