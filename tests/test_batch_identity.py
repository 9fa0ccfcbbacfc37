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


def test_each_offset_log_entry_is_read_once_per_query(tmp_path: Path) -> None:
    """Batch N reads offsets/N and offsets/N-1 (its identity and its late records' watermark), batch N+1
    offsets/N again: three reads a batch (three GETs on s3a://) where one does."""
    from rewind.driver.late_routing import late_events_watermark_ms
    from rewind.driver.offset_log import OffsetLog
    from rewind.storage.location import read_text

    for n in range(4):
        (tmp_path / "offsets").mkdir(exist_ok=True)
        meta = json.dumps({"batchWatermarkMs": n * 1000, "batchTimestampMs": 0, "conf": {}})
        (tmp_path / "offsets" / str(n)).write_text(f'v1\n{meta}\n{{"t":{{"0":{n * 10}}}}}\n')
    names: list[str] = []
    log = OffsetLog(str(tmp_path), read=lambda cp, rel: names.append(rel) or read_text(cp, rel))
    writer = BatchWriter(sink=None, split=lambda f, b: {}, checkpoint=str(tmp_path))
    writer.offset_log = log
    for batch in (1, 2, 3):
        assert late_events_watermark_ms(tmp_path, batch, log) == (batch - 1) * 1000
        ident = json.loads(writer.source_offsets(batch))
        assert ident["start"] == {"t": {"0": (batch - 1) * 10}} and ident["end"] == {"t": {"0": batch * 10}}
    assert names == ["offsets/0", "offsets/1", "offsets/2", "offsets/3"]  # each once, in order
    assert len(log._kept) == OffsetLog.KEEP
