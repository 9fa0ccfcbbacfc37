"""Where a stream starts, kept once in its checkpoint (``sources/0/0``), for Rewind's Python source too.

Why: an entry may start a stream somewhere other than ``earliest`` (``startingOffsets: latest``, a timestamp,
explicit offsets). Spark's Kafka connector resolves that start once and writes it in the checkpoint
(``sources/0/0``: ``v1`` and the offsets JSON); a restart before the first batch committed reads it back, and
proofs start there (``rewind.proof.origin``). A Python data source cannot see its checkpoint, so Rewind's
(``format: rewind_kafka``) resolved the start again at each such restart: "latest" had moved, and the records
between the two were never read; and its proofs, with no origin, counted every record before the start as
missing (a false FAIL).

So the driver does for it what the connector does for itself: on a new checkpoint it resolves the start
with the source's own rules (``KafkaStreamReader.initialOffset``), writes it in the connector's format
before the query starts, and from then on hands the source the offsets that file holds (``startingOffsets``,
the entry's other start options dropped), whoever wrote it (a stateless upgrade's new checkpoint too). A
checkpoint that already has batches but no such file (a stream started before Rewind kept it) is left as
it was: its real start is unknown, and a guess would make its proofs skip records.

Until the first commit the kept start is also matched to the topics' partitions now, as the connector's
planning does: a partition added since it was kept starts at its earliest offset (``startingOffsets`` must
name every partition, so the source would otherwise refuse to start); one that is gone (its topic deleted)
fails the start naming it, or with ``failOnDataLoss: false`` is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from rewind.checkpoints.logs import has_batches
from rewind.driver.source import START_KEYS
from rewind.kafka.options import SOURCE_NAME
from rewind.kafka.types import EARLIEST
from rewind.storage.location import open_storage

__all__ = ["INITIAL", "gives_a_start", "initial_offsets_bytes", "match_partitions", "parse_initial_offsets",
           "pinned_options"]

log = logging.getLogger(__name__)

#: Spark's Kafka connector's file of a checkpoint's initial offsets.
INITIAL = "sources/0/0"


def gives_a_start(options: Mapping[str, Any]) -> bool:
    """Pure: the entry's source options start a new stream somewhere other than ``earliest``."""
    given = {k.lower(): str(v).strip().lower() for k, v in options.items()}
    if any(k in given for k in START_KEYS[1:]):  # a timestamp wins over startingOffsets
        return True
    return "startingoffsets" in given and given["startingoffsets"] != "earliest"


def parse_initial_offsets(data: bytes) -> dict[tuple[str, int], int]:
    """Pure: Spark's Kafka connector's ``sources/0/0`` (an optional zero byte, ``v1``, then the offsets JSON
    ``{"topic": {"0": 42}}``) as offsets per (topic, partition). Refused (ValueError) when it is not that."""
    text = data.decode("utf-8").lstrip("\x00")
    version, _, body = text.partition("\n")
    if version.strip() != "v1":
        raise ValueError(f"not Spark's Kafka initial offsets (version line {version.strip()[:20]!r})")
    return _per_partition(json.loads(body))


def _per_partition(doc: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 42}}`` (Spark's offsets JSON) as offsets per (topic, partition)."""
    return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def initial_offsets_bytes(offsets: Mapping[tuple[str, int], int]) -> bytes:
    """Pure: the file ``parse_initial_offsets`` reads, byte for byte the connector's format (a zero byte, ``v1``,
    the JSON: its reader skips the first byte unread), so either source reads it."""
    return b"\x00v1\n" + _offsets_json(offsets).encode()


def _offsets_json(offsets: Mapping[tuple[str, int], int]) -> str:
    doc: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(part)] = int(off)
    return json.dumps(doc, separators=(",", ":"))


def _with_start(options: Mapping[str, str], offsets: Mapping[tuple[str, int], int]) -> dict[str, str]:
    kept = {k: v for k, v in options.items() if k.lower() not in START_KEYS}
    return {**kept, "startingOffsets": _offsets_json(offsets)}


def match_partitions(kept: Mapping[tuple[str, int], int], now: Iterable[tuple[str, int]]
                     ) -> tuple[dict[tuple[str, int], int], list[tuple[str, int]], list[tuple[str, int]]]:
    """Pure: the kept start over the partitions there are ``now`` (a new one at ``EARLIEST``, as Spark's connector
    reads a partition its start does not name), with the partitions added and those gone, both sorted."""
    current = set(now)
    added = sorted(current - set(kept))
    gone = sorted(set(kept) - current)
    matched = {tp: off for tp, off in kept.items() if tp in current}
    matched.update(dict.fromkeys(added, EARLIEST))
    return matched, added, gone


def _reader(options: Mapping[str, str]) -> Any:
    from rewind.kafka.options import parse_options  # lazy: only streams on the Python source look up a start
    from rewind.kafka.source import KafkaStreamReader  # lazy: its data source classes, only here

    return KafkaStreamReader(parse_options(options, streaming=True))


def _resolve(options: Mapping[str, str]) -> dict[tuple[str, int], int]:
    """The start the source itself would take now (its ``initialOffset``: the same rules, the same broker)."""
    reader = _reader(options)
    try:
        return _per_partition(reader.initialOffset())
    finally:
        reader.close_lookup()


def _matched(stream: str, kept: dict[tuple[str, int], int], options: Mapping[str, str], where: str
             ) -> dict[tuple[str, int], int]:
    """``kept`` over the topics' partitions now (``match_partitions``), saying what changed since it was kept."""
    reader = _reader(options)
    try:
        matched, added, gone = match_partitions(kept, reader.lookup().partitions(reader.opts.topics))
    finally:
        reader.close_lookup()
    if added:
        log.info("stream %s: partition(s) %s appeared after its start was kept in %s; they start at their earliest "
                 "offset", stream, _names(added), where)
    if gone and reader.opts.fail_on_data_loss:
        raise ValueError(f"stream {stream}: partition(s) {_names(gone)} of its start ({where}) no longer exist (topic "
                         f"deleted?); their records cannot be read. Recreate the topic, or set the source option "
                         f"failOnDataLoss: false to start without them")
    if gone:
        log.warning("stream %s: partition(s) %s of its start (%s) no longer exist; starting without them "
                    "(failOnDataLoss: false)", stream, _names(gone), where)
    return matched


def _names(tps: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in tps)


def pinned_options(stream: str, source_format: str, options: Mapping[str, str], checkpoint: str) -> dict[str, str]:
    """The source options a driver reads with. For Rewind's Python source: the start kept in the checkpoint when
    there is one (as Spark's connector reads it instead of ``startingOffsets`` ever after), resolved and kept
    first on a new checkpoint whose entry gives a start; else ``options`` unchanged."""
    if source_format != SOURCE_NAME:
        return dict(options)
    store = open_storage(checkpoint)
    if store.size(INITIAL):
        try:
            kept = parse_initial_offsets(store.read_bytes(INITIAL))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"stream {stream}: {store.url(INITIAL)} is not a record of where the stream started "
                             f"({exc}); restore the checkpoint from a savepoint (`rewind savepoint restore`)") from exc
        if not has_batches(store, "commits"):  # the source still starts from it
            kept = _matched(stream, kept, options, store.url(INITIAL))
        return _with_start(options, kept)
    if not gives_a_start(options):
        return dict(options)
    if has_batches(store, "offsets"):
        log.warning("stream %s: its checkpoint %s has batches but no record of where it started (it began before "
                    "Rewind kept one); a restart before its first commit resolves the start again", stream,
                    store.url())
        return dict(options)
    offsets = _resolve(options)
    store.write_bytes(INITIAL, initial_offsets_bytes(offsets))
    log.info("stream %s starts at %s (kept in %s)", stream,
             ", ".join(f"{t}[{p}] {o}" for (t, p), o in sorted(offsets.items())), store.url(INITIAL))
    return _with_start(options, offsets)
