"""Demo event format: how events are made (producer) and judged (stream and verifier).

One classifier serves the Spark transform and the exactly-once verifier, so the
stream and the proof can never disagree on what counts as malformed or late.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

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
            "event_time": self.event_time.astimezone(timezone.utc).isoformat(timespec="milliseconds"),
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
    return parsed.astimezone(timezone.utc)


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
        lag = datetime.fromtimestamp(kafka_timestamp_ms / 1000, timezone.utc) - event_time
        if lag > allowed_lateness:
            return Verdict(None, f"late: event time {lag.total_seconds():.0f}s behind Kafka timestamp "
                                 f"(allowed {allowed_lateness.total_seconds():.0f}s)")
    return Verdict(Event(doc["event_id"], doc["key"], float(amount), event_time), None)
