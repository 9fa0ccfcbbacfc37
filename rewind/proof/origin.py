"""Where a stream's records begin for its proofs, when its registry entry starts it mid-topic.

Why: a proof answers for every retained record below the stream's committed end. A stream whose entry
gives a start (``startingOffsets: latest``, a timestamp, explicit offsets) never read the records before
it, so they counted as missing: a false FAIL on every proof of such a stream. Its origin bounds them.

What the origin is: the offsets of its first batch's start, per partition, as Spark's Kafka connector
records them once in the checkpoint (``sources/0/0``: a zero byte or none, ``v1``, the offsets JSON). The
first proof that finds them keeps them in the stream's control store (``origin``, created once, never
overwritten), because a later checkpoint does not start where the stream did: an upgrade in stateless
mode writes a new checkpoint's ``sources/0/0`` at the upgrade's offsets. A stream that starts at
``earliest`` (Rewind's default) has no origin: its proofs start at the earliest retained record, as
before. A stream on Rewind's Python source has the same file, written by its driver
(``rewind.driver.initial_offsets``), unless its checkpoint began before Rewind kept it.

A partition the origin does not name (added to the topic later) starts at its earliest retained record:
Spark's connector reads a new partition from its beginning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from rewind.checkpoints.pointer import open_active_checkpoint
from rewind.control.location import control_store
from rewind.driver.bounded import partitions_of
from rewind.driver.initial_offsets import INITIAL, gives_a_start, parse_initial_offsets
from rewind.kafka.types import TP

__all__ = ["ORIGIN", "floor", "gives_a_start", "origin_text", "parse_initial_offsets", "proved_partitions",
           "stream_origin", "unknown_origin_note"]

log = logging.getLogger(__name__)

#: The control-store document that keeps the stream's origin.
ORIGIN = "origin"

K = TypeVar("K")


def _as_doc(offsets: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = off
    return {"offsets": out}


def _from_doc(doc: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in doc.get("offsets", {}).items() for p, o in parts.items()}


def stream_origin(spec: Any) -> dict[tuple[str, int], int]:
    """The stream's origin per (topic, partition), {} when it has none (see the module): the control store's,
    else its active checkpoint's initial offsets, which are then kept there."""
    if not gives_a_start(spec.source.options):
        return {}
    store = control_store(spec)
    kept = store.read(ORIGIN)
    if kept is not None and kept.doc.get("offsets"):
        return _from_doc(kept.doc)
    checkpoint = open_active_checkpoint(spec)
    if not checkpoint.size(INITIAL):
        return {}  # not started yet, or a source that keeps no initial offsets
    try:
        origin = parse_initial_offsets(checkpoint.read_bytes(INITIAL))
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("%s: %s is not Spark's Kafka initial offsets (%s); its proofs start at the earliest retained "
                    "records", spec.name, checkpoint.url(INITIAL), exc)
        return {}
    if store.create(ORIGIN, _as_doc(origin)) is None:  # another proof kept one first: that one counts
        again = store.read(ORIGIN)
        if again is not None and again.doc.get("offsets"):
            return _from_doc(again.doc)
    log.info("%s starts mid-topic (its entry gives a start): its proofs begin at its first batch's start (%s)",
             spec.name, origin_text(origin))
    return origin


def floor(earliest: Mapping[K, int], origin: Mapping[tuple[str, int], int]) -> dict[K, int]:
    """Pure: per partition, where a proof starts: the earliest retained offset, or the stream's origin when
    that is later. ``earliest``'s keys may be ``TP`` or (topic, partition) tuples (equal either way)."""
    return {tp: max(first, origin.get(tp, first)) for tp, first in earliest.items()}  # type: ignore[call-overload]


def proved_partitions(spec: Any, bootstrap: str) -> tuple[dict[TP, int], dict[TP, int]]:
    """(where a proof of the stream starts, end offset) per partition of its topics: ``partitions_of``'s
    earliest retained offsets raised to the stream's origin (``floor``). The one place the proofs that run
    ``build`` over a span get their partitions, so none proves records the stream never read."""
    earliest, ends = partitions_of(spec, bootstrap)
    return floor(earliest, stream_origin(spec)), ends


def origin_text(origin: Mapping[tuple[str, int], int]) -> str:
    """Pure: ``topic[partition] offset`` per partition, for a proof's notes and the log."""
    return ", ".join(f"{topic}[{part}] {off}" for (topic, part), off in sorted(origin.items()))


def unknown_origin_note(spec: Any, origin: Mapping[tuple[str, int], int]) -> str | None:
    """A proof's note when the stream was started mid-topic on Rewind's Python source but its checkpoint has no
    record of where (it began before Rewind kept one): records before its start are judged too, so a FAIL may
    name them as missing."""
    if origin or not gives_a_start(spec.source.options) or spec.source.format != "rewind_kafka":
        return None
    return ("this stream's entry gives a start other than earliest, but its checkpoint has no record of where it "
            "started (it began before Rewind's Python source kept one, or has not started): records before its "
            "start are judged too and count as missing (docs/limitations.md)")
