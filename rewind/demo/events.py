"""Demo event format: how events are made (producer) and judged (stream and verifier).

One classifier serves the Spark transform and the exactly-once verifier, so the
stream and the proof can never disagree on what counts as malformed or late.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

try:  # a C JSON decoder for the batch classifier's fast path; without it every record takes `classify`
    import msgspec
except ImportError:  # pragma: no cover - msgspec comes with the pinned Airflow
    msgspec = None  # type: ignore[assignment]

REQUIRED = ("event_id", "key", "amount", "event_time")
#: Records whose event time trails their Kafka timestamp by more than this go to the
#: dead-letter table as late. It is kept below the stream's watermark delay so that the
#: stateful operators never have to drop a record silently.
DEFAULT_ALLOWED_LATENESS = timedelta(seconds=20)
MALFORMED_KINDS = ("not_json", "missing_field", "wrong_type", "no_zone")


@dataclass(frozen=True)
class Event:
    event_id: str
    key: str
    amount: float
    event_time: datetime

    def encode(self) -> bytes:
        return json.dumps({
            "event_id": self.event_id, "key": self.key, "amount": self.amount,
            "event_time": self.event_time.astimezone(UTC).isoformat(timespec="milliseconds"),
        }, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Verdict:
    """What the stream does with one Kafka record: an event, or a dead letter with a reason."""

    event: Event | None
    reason: str | None


def event_id_for(prefix: str, seq: int) -> str:
    return f"{prefix}-{seq:09d}"


def make_event(prefix: str, seq: int, event_time: datetime, keys: int = 16) -> Event:
    """Deterministic content for sequence number ``seq`` (only the time is the caller's)."""
    return Event(event_id_for(prefix, seq), f"k{(seq * 7919) % keys:03d}", round(((seq * 37) % 1000) / 10, 1),
                 event_time)


def malformed_payload(seq: int) -> bytes:
    kind = MALFORMED_KINDS[seq % len(MALFORMED_KINDS)]
    if kind == "not_json":
        return b'{"event_id": "broken-' + str(seq).encode() + b'", "key": '
    if kind == "missing_field":
        return json.dumps({"event_id": f"bad-{seq}", "amount": 1.0, "event_time": "2026-01-01T00:00:00Z"}).encode()
    if kind == "wrong_type":
        return json.dumps({"event_id": f"bad-{seq}", "key": "k", "amount": "ten",
                           "event_time": "2026-01-01T00:00:00Z"}).encode()
    return json.dumps({"event_id": f"bad-{seq}", "key": "k", "amount": 1.0,
                       "event_time": "2026-01-01T00:00:00"}).encode()


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def classify(value: bytes | None, kafka_timestamp_ms: int | None,
             allowed_lateness: timedelta = DEFAULT_ALLOWED_LATENESS) -> Verdict:
    """Parse one Kafka value; name the first problem found, or return the event."""
    if value is None:
        return Verdict(None, "empty value")
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        return Verdict(None, f"malformed JSON: {str(exc)[:80]}")
    if not isinstance(doc, dict):
        return Verdict(None, f"not a JSON object: {type(doc).__name__}")
    missing = [f for f in REQUIRED if f not in doc or doc[f] is None]
    if missing:
        return Verdict(None, f"missing field(s): {', '.join(missing)}")
    if not isinstance(doc["event_id"], str) or not doc["event_id"]:
        return Verdict(None, "wrong type: event_id must be a non-empty string")
    if not isinstance(doc["key"], str):
        return Verdict(None, "wrong type: key must be a string")
    amount = doc["amount"]
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        return Verdict(None, f"wrong type: amount must be a number, got {type(amount).__name__}")
    event_time = _parse_time(doc["event_time"])
    if event_time is None:
        return Verdict(None, "wrong type: event_time must be ISO 8601 with a zone")
    if kafka_timestamp_ms is not None:
        lag = datetime.fromtimestamp(kafka_timestamp_ms / 1000, UTC) - event_time
        if lag > allowed_lateness:
            return Verdict(None, f"late: event time {lag.total_seconds():.0f}s behind Kafka timestamp "
                                 f"(allowed {allowed_lateness.total_seconds():.0f}s)")
    return Verdict(Event(doc["event_id"], doc["key"], float(amount), event_time), None)


# ---------------------------------------------------------------------------------------------
# The batch form of ``classify`` (the stream's hot path)
# ---------------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Kafka timestamps (ms) below this in magnitude convert exactly: ``datetime.fromtimestamp(ms / 1000)``
#: is off by less than half a microsecond from ``ms * 1000`` µs while |ms / 1000| < 2**33 s.
_EXACT_MS = 1 << 42
#: Integer amounts that ``float()`` converts exactly and without OverflowError.
_EXACT_INT = 1 << 53
_UNSEEN = object()


@dataclass
class VerdictColumns:
    """``classify`` over many records, column-wise: one list per field, ``None`` where it does not apply.

    A record is an event when ``reason[i] is None``; ``event_time_us`` is the event time in
    microseconds since the epoch (UTC), as ``Event.event_time`` would be.
    """

    event_id: list[str | None] = field(default_factory=list)
    key: list[str | None] = field(default_factory=list)
    amount: list[float | None] = field(default_factory=list)
    event_time_us: list[int | None] = field(default_factory=list)
    reason: list[str | None] = field(default_factory=list)

    def verdict(self, i: int) -> Verdict:
        """Record ``i`` as the ``Verdict`` that ``classify`` returns for it."""
        if self.reason[i] is not None:
            return Verdict(None, self.reason[i])
        us = self.event_time_us[i]
        assert us is not None
        return Verdict(Event(self.event_id[i], self.key[i], self.amount[i],  # type: ignore[arg-type]
                             _EPOCH + timedelta(microseconds=us)), None)


if msgspec is not None:
    class _Doc(msgspec.Struct):
        """The four fields ``classify`` reads; others are skipped (``classify`` ignores them too)."""

        event_id: str
        key: str
        amount: Any
        event_time: str

    _DECODE = msgspec.json.Decoder(_Doc).decode
else:  # pragma: no cover
    _DECODE = None


def classify_many(values: Sequence[bytes | None], kafka_timestamps_ms: Sequence[int | None],
                  allowed_lateness: timedelta = DEFAULT_ALLOWED_LATENESS) -> VerdictColumns:
    """``classify`` for each ``(values[i], kafka_timestamps_ms[i])``, with the same verdicts.

    Why a second entry point: the stream classifies every record, and ``classify`` (json.loads,
    dataclasses, datetimes per record) is most of its Python time. Here a record takes a fast path
    only when it is plainly a valid, on-time event: ASCII bytes (so the C decoder and json.loads
    read the same text) that msgspec decodes into the four fields with string ids, a non-empty
    event id, a float or exactly convertible int amount, an event time that ``_parse_time`` (the
    same function, cached per distinct string) accepts, and a lateness within the limit, computed
    in whole microseconds. Everything else -- every dead letter and anything unusual -- goes
    through ``classify`` itself, so reasons are ``classify``'s own text. Where msgspec and json.loads
    differ (NaN, BOMs, lone surrogates, non-ASCII) msgspec refuses and ``classify`` decides.
    ``tests/test_events.py`` checks both agree on a corpus of valid, malformed, late and duplicate
    records.
    """
    n = len(values)
    if len(kafka_timestamps_ms) != n:
        raise ValueError(f"{n} values but {len(kafka_timestamps_ms)} timestamps")
    out = VerdictColumns([None] * n, [None] * n, [None] * n, [None] * n, [None] * n)
    event_id, key, amount, event_time_us, reason = out.event_id, out.key, out.amount, out.event_time_us, out.reason
    allowed_us = allowed_lateness // _US
    times: dict[str, Any] = {}
    decode = _DECODE
    for i in range(n):
        value, ms = values[i], kafka_timestamps_ms[i]
        if (decode is not None and value is not None and value.isascii()
                and (ms is None or (ms.__class__ is int and -_EXACT_MS < ms < _EXACT_MS))):
            try:
                doc = decode(value)
            except Exception:  # noqa: BLE001 - any refusal (malformed, too deep, out of range): classify decides
                doc = None
            if doc is not None and doc.event_id:
                a = doc.amount
                kind = a.__class__
                if kind is float or (kind is int and -_EXACT_INT <= a <= _EXACT_INT):
                    s = doc.event_time
                    us = times.get(s, _UNSEEN)
                    if us is _UNSEEN:
                        parsed = _parse_time(s)
                        us = times[s] = None if parsed is None else (parsed - _EPOCH) // _US
                    if us is not None and (ms is None or ms * 1000 - us <= allowed_us):
                        event_id[i], key[i], amount[i], event_time_us[i] = doc.event_id, doc.key, float(a), us
                        continue
        verdict = classify(value, ms, allowed_lateness)
        ev = verdict.event
        if ev is None:
            reason[i] = verdict.reason
        else:
            event_id[i], key[i], amount[i] = ev.event_id, ev.key, ev.amount
            event_time_us[i] = (ev.event_time - _EPOCH) // _US
    return out
