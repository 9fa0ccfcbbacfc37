"""Where a stream's last successful proof ended, so the next one proves only what came after.

Why a document of the stream's control store (``proof-cursor``; on one host the file
``<stream>.proof-cursor.json`` in its directory), not a local file: the proof (``rewind verify``, the
hourly DQ DAG, on whichever worker) must run in memory bounded by the range it proves, not by the
topic's history; a topic of 5,000,000 records is proven a slice at a time. Only a proof that
passed moves the cursor: a failed range is proven again next time. Written with a conditional
write, so a killed proof leaves the previous cursor and two proofs at once lose no end.

``resolve_span`` turns "since the last proof", "since a time" or "from the beginning" into
``[start, end)`` per partition, where the end is Kafka's end now, or the stream's last committed
batch when it runs (later records are still in flight).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rewind.control.location import control_store
from rewind.control.store import update
from rewind.kafka.client_config import stream_consumer_config
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.paths import control_dir
from rewind.proof.origin import floor, stream_origin

Span = dict[tuple[str, int], tuple[int, int]]
Since = Literal["cursor", "beginning", "time"]


CURSOR = "proof-cursor"


def cursor_path(spec: Any) -> Path:
    """Where a one-host (directory) control store keeps the cursor."""
    return control_dir(spec) / f"{spec.name}.proof-cursor.json"


def _ends(doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in doc.get("end", {}).items() for p, o in parts.items()}


def read_cursor(spec: Any) -> dict[tuple[str, int], int]:
    """The end offsets of the last passed proof ({} before the first)."""

    got = control_store(spec).read(CURSOR)
    return _ends(got.doc) if got else {}


def write_cursor(spec: Any, span: Span, run_id: str) -> None:
    """Record that ``span`` is proven: the next proof starts at its ends (kept per partition)."""

    def move(stored: dict[str, Any]) -> dict[str, Any]:
        ends = _ends(stored)
        ends.update({k: end for k, (_, end) in span.items()})
        doc: dict[str, Any] = {"stream": spec.name, "run_id": run_id, "at": datetime.now(UTC).isoformat(), "end": {}}
        for (topic, part), off in sorted(ends.items()):
            doc["end"].setdefault(topic, {})[str(part)] = off
        return doc

    update(control_store(spec), CURSOR, move)


def choose_span(earliest: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int], *, since: Since,
                cursor: Mapping[tuple[str, int], int], at_time: Mapping[tuple[str, int], int | None] | None = None,
                committed: Mapping[tuple[str, int], int] | None = None) -> tuple[Span, list[str]]:
    """Pure: the ``[start, end)`` to prove per partition, and notes on what was clipped and why."""
    notes: list[str] = []
    span: Span = {}
    for tp, end in sorted(ends.items()):
        first = earliest.get(tp, 0)
        if committed is not None:
            end = min(end, committed.get(tp, first))
        if since == "beginning":
            start = first
        elif since == "time":
            found = (at_time or {}).get(tp)
            start = end if found is None else found
        else:
            start = cursor.get(tp, first)
            if start > end:
                notes.append(f"{tp[0]}[{tp[1]}]: the last proof ended at {start}, past the end {end} "
                             "(the topic was recreated or truncated?): proving from the beginning")
                start = first
        if start < first:
            notes.append(f"{tp[0]}[{tp[1]}]: offsets {start}..{first - 1} are no longer in Kafka (retention): "
                         f"proving from {first}")
            start = first
        span[tp] = (start, max(start, end))
    return span, notes


def resolve_span(spec: Any, bootstrap: str, *, since: Since = "cursor", since_time: datetime | None = None,
                 committed: Mapping[tuple[str, int], int] | None = None) -> tuple[Span, list[str]]:
    """Ask Kafka for the partitions' first and end offsets (and offsets for ``since_time``), then ``choose_span``."""

    config = stream_consumer_config(spec.source.options, bootstrap, "rewind-proof-range")
    with KafkaOffsetClient(config) as client:
        tps = client.partitions(spec.topics)
        earliest = floor({(tp.topic, tp.partition): o for tp, o in client.earliest_offsets(tps).items()},
                         stream_origin(spec))  # a stream started mid-topic: from its start
        ends = {(tp.topic, tp.partition): o for tp, o in client.end_offsets(tps).items()}
        at_time = None
        if since == "time":
            if since_time is None:
                raise ValueError("since='time' needs since_time")
            ms = int(since_time.timestamp() * 1000)
            found = client.offsets_for_times({tp: ms for tp in tps})
            at_time = {(tp.topic, tp.partition): o for tp, o in found.items()}
    return choose_span(earliest, ends, since=since, cursor=read_cursor(spec), at_time=at_time, committed=committed)
