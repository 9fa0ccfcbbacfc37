"""A Kafka sink's output topics read back as tables: the committed records, with the tables' conflict rules.

Why a local SQLite copy: the proofs and replays read a sink through ``Sink.read_table`` /
``read_rows(where=...)``, whose conditions are SQLAlchemy expressions (``rewind.sink.dialects``).
Replaying each topic ``read_committed`` into an ``ExactlyOnceSqlSink`` on a temporary SQLite file
keeps those reads identical for every sink: the same conflict rules (a key's records are in one
partition, in write order, so "ignore" keeps the first and "replace" the last), the same dtypes,
the same conditions. The copy is caught up incrementally from the offset after the last record
it holds, so a second read costs only what was written since.

Why the wait before reading (``settled_ends``): a transaction's commit markers reach the partitions
a moment after ``commit_transaction`` returns, so a read right after a commit could stop short of
it; the read waits (up to ``SETTLE_S``) for the last stable offset to reach the high watermark,
and past that reads what is committed and logs which transaction holds the rest back.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from rewind.api.tables import TableSpec
from rewind.kafka.lookups import KafkaOffsetClient
from rewind.kafka.reader import read_to_end
from rewind.kafka.types import TP, UnknownTopicError
from rewind.sink.kafka_codec import decode_key, decode_value, encode_key
from rewind.sink.sql import ExactlyOnceSqlSink
from rewind.sink.sql_delete import sql_delete

log = logging.getLogger(__name__)

__all__ = ["TopicMirror", "settled_ends"]


def _key_of(spec: TableSpec, row: Mapping[str, Any]) -> bytes:

    return encode_key(spec, row)

SETTLE_S = 10.0


def settled_ends(config: Mapping[str, Any], topic: str, wait_s: float = SETTLE_S) -> dict[TP, int] | None:
    """The last stable offset of each partition of ``topic`` once it reaches the high watermark (or
    after ``wait_s``); None when the topic does not exist."""
    with KafkaOffsetClient({**config, "isolation.level": "read_uncommitted"}, 30.0) as raw, \
            KafkaOffsetClient({**config, "isolation.level": "read_committed"}, 30.0) as committed:
        try:
            tps = raw.partitions([topic])
        except UnknownTopicError:
            return None
        deadline = time.monotonic() + wait_s
        while True:
            high, stable = raw.end_offsets(tps), committed.end_offsets(tps)
            open_ = {tp: (stable[tp], high[tp]) for tp in tps if stable[tp] < high[tp]}
            if not open_ or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    if open_:
        log.warning("topic %s: an open transaction holds back %s (last stable offset, high watermark): reading "
                    "what is committed; it ends when its producer commits or aborts, or after its "
                    "transaction.timeout.ms", topic, {f"{t.topic}[{t.partition}]": v for t, v in open_.items()})
    return stable


class TopicMirror:
    """Spec tables mirrored from their topics into a temporary SQLite file (see the module docstring)."""

    def __init__(self, specs: Mapping[str, TableSpec], topics: Mapping[str, str], config: Mapping[str, Any]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="rewind-kafka-mirror-")
        self.specs = dict(specs)
        self.topics = dict(topics)
        self.config = {**config, "isolation.level": "read_committed"}
        self.sql = ExactlyOnceSqlSink(f"sqlite:///{self._dir.name}/mirror.db", "mirror", list(specs.values()))
        self._next: dict[TP, int] = {}
        #: per table, the record keys read so far (a record's key is its row's key: see kafka_codec)
        self.keys: dict[str, set[bytes]] = {name: set() for name in specs}
        #: per ``ignore`` table, the rows of records whose key was held already (a re-send: the copy keeps
        #: the first, a proof must still count them, ``repeated``)
        self.repeats: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
        self.foreign = 0  # records that are not rows of their table (another producer wrote to the topic)

    def catch_up(self, names: Iterable[str]) -> None:
        """Read every committed record of these tables' topics not yet in the copy."""
        for name in names:
            topic = self.topics[name]
            ends = settled_ends(self.config, topic)
            if ends is None:
                continue  # not created yet: an empty table
            lower = {tp: self._next.get(tp, 0) for tp in ends}
            if all(lower[tp] >= end for tp, end in ends.items()):
                continue
            for msgs in read_to_end(self.config, [topic], upper=ends, lower=lower):
                rows: list[dict[str, Any]] = []
                for m in msgs:
                    tp = TP(topic, m.partition())  # type: ignore[arg-type]
                    self._next[tp] = m.offset() + 1  # type: ignore[operator]
                    key = m.key() or b""
                    if m.value() is None:  # a tombstone: the row was deleted (rewind.sink.deletes)
                        self.sql.write_rows({name: rows})
                        rows = []
                        self._delete(name, key)
                        continue
                    try:
                        row = decode_value(self.specs[name], m.value())
                    except ValueError as exc:
                        self.foreign += 1
                        log.warning("topic %s[%s] offset %s is not a row of table %s (%s): left out", topic,
                                    m.partition(), m.offset(), name, exc)
                        continue
                    if key in self.keys[name] and self.specs[name].on_conflict == "ignore":
                        self.repeats[name].append(row)
                    rows.append(row)
                    self.keys[name].add(key)
                self.sql.write_rows({name: rows})
            for tp, end in ends.items():  # past trailing transaction markers
                self._next[tp] = max(self._next.get(tp, 0), end)

    def repeated(self, name: str) -> pd.DataFrame:
        """The later copies of keys of table ``name`` (``ignore`` tables), typed as ``read_table`` types them."""
        rows = self.repeats[name]
        spec = self.specs[name]
        frame = pd.DataFrame(rows, columns=list(spec.column_names))
        for c in spec.columns:
            if c.type == "timestamp":
                frame[c.name] = pd.to_datetime(frame[c.name], utc=True)
            elif c.type in ("int", "bigint"):
                frame[c.name] = pd.array(frame[c.name], dtype="Int64")
        return frame

    def _delete(self, name: str, key: bytes) -> None:

        self.keys[name].discard(key)
        self.repeats[name] = [r for r in self.repeats[name] if key != _key_of(self.specs[name], r)]
        sql_delete(self.sql, name, pd.DataFrame([decode_key(self.specs[name], key)]))

    def dispose(self) -> None:
        self.sql.dispose()
        self._dir.cleanup()
