"""The status listener reads each batch's progress from its JSON (``json_progress_listener``), not field by field
through py4j as PySpark's own conversion does (a quarter of a driver's JVM samples went to that conversion's
class-path lookups). What the driver reads from a progress must be the same either way: checked on a real
stateful query in the session's Spark, beside a plain PySpark listener, batch by batch."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rewind.control.status import StreamStatus, make_listener


def offsets(text: str | None) -> Any:
    """An offset as data: PySpark's conversion writes a missing one as ``None`` (Python's str of null), the
    JSON as ``null``; Rewind reads both as no offsets (``rewind.control.status._offsets``)."""
    return None if text in (None, "None", "null") else json.loads(text)


def test_the_json_progress_equals_pysparks_field_by_field_progress(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    plain: dict[int, Any] = {}
    ours: dict[int, Any] = {}

    class Plain(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None: ...

        def onQueryProgress(self, event: Any) -> None:
            plain[event.progress.batchId] = event.progress

        def onQueryTerminated(self, event: Any) -> None: ...

    status = StreamStatus(stream="probe")
    listener = make_listener(tmp_path / "probe.json", status,
                             on_progress=lambda p: ours.__setitem__(p.batchId, p))
    reference = Plain()
    spark.streams.addListener(listener)
    spark.streams.addListener(reference)
    rate = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
            .withWatermark("timestamp", "1 second"))
    counts = rate.dropDuplicates(["value", "timestamp"]).groupBy(F.window("timestamp", "1 second")).count()
    query = counts.writeStream.format("noop").outputMode("append").trigger(processingTime="500 milliseconds") \
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ({2, 3, 4} <= set(ours) & set(plain)):
            time.sleep(0.2)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
        spark.streams.removeListener(reference)
    both = sorted(set(ours) & set(plain))
    assert {2, 3, 4} <= set(both), (sorted(ours), sorted(plain))
    for batch in both:
        a, b = ours[batch], plain[batch]
        assert (a.batchId, a.numInputRows, a.id, a.runId) == (b.batchId, b.numInputRows, b.id, b.runId)
        assert a.eventTime == b.eventTime and a.durationMs.keys() == b.durationMs.keys()
        for end in ("startOffset", "endOffset", "latestOffset"):
            assert [offsets(getattr(s, end)) for s in a.sources] == [offsets(getattr(s, end)) for s in b.sources]
        assert [s.description for s in a.sources] == [s.description for s in b.sources]
        assert [(o.operatorName, o.numRowsTotal, o.numRowsUpdated, o.numRowsDroppedByWatermark)
                for o in a.stateOperators] == [(o.operatorName, o.numRowsTotal, o.numRowsUpdated,
                                                o.numRowsDroppedByWatermark) for o in b.stateOperators]
        assert len(a.stateOperators) == 2
    assert status.last_batch_id is not None and status.last_batch_id >= 4
    assert json.loads((tmp_path / "probe.json").read_text())["last_batch_id"] == status.last_batch_id
