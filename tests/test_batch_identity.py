"""The sink ledger's batch identity (start, end, watermark): when a re-run batch may be skipped."""

from __future__ import annotations

import json
from pathlib import Path

from rewind.driver.runner import BatchWriter


def _offsets(cp: Path, batch: int, ends: dict[str, int], watermark_ms: int) -> None:
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": 1, "conf": {}}
    (cp / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps({'t': ends})}")


def _identity(cp: Path, batch: int) -> dict:
    writer = BatchWriter(sink=None, split=lambda f, b: {}, checkpoint=str(cp))
    return json.loads(writer.source_offsets(batch))


def test_a_plain_retry_has_the_same_identity(tmp_path: Path) -> None:
    _offsets(tmp_path, 4, {"0": 10}, 100)
    _offsets(tmp_path, 5, {"0": 20}, 200)
    first = _identity(tmp_path, 5)
    assert first == {"start": {"t": {"0": 10}}, "end": {"t": {"0": 20}}, "watermark_ms": 200}
    assert _identity(tmp_path, 5) == first


def test_same_end_from_another_start_is_another_batch(tmp_path: Path) -> None:
    """The lost-windows case: after a restore, batch 16 re-planned to end where the old 16 ended."""
    _offsets(tmp_path, 15, {"0": 23000}, 100)
    _offsets(tmp_path, 16, {"0": 26599}, 200)
    before = _identity(tmp_path, 16)
    _offsets(tmp_path, 15, {"0": 26599}, 100)  # the re-planned 15 swallowed the old 16's range
    assert _identity(tmp_path, 16) != before


def test_another_watermark_is_another_batch(tmp_path: Path) -> None:
    _offsets(tmp_path, 0, {"0": 5}, 0)
    _offsets(tmp_path, 1, {"0": 5}, 1000)
    before = _identity(tmp_path, 1)
    _offsets(tmp_path, 1, {"0": 5}, 2000)
    assert _identity(tmp_path, 1) != before


def test_first_batch_and_unreadable_previous(tmp_path: Path) -> None:
    _offsets(tmp_path, 0, {"0": 5}, 0)
    assert _identity(tmp_path, 0)["start"] is None
    _offsets(tmp_path, 7, {"0": 9}, 0)  # offsets/6 is missing
    assert _identity(tmp_path, 7)["start"] == "unknown"
    assert BatchWriter(sink=None, split=lambda f, b: {}, checkpoint=str(tmp_path)).source_offsets(3) is None
