"""Demo-event records for the classifier tests: valid, duplicate, late, malformed and odd ones, with Kafka
timestamps (some missing), lateness at the limit and seeded byte-level mutations."""

from datetime import UTC, datetime, timedelta

from rewind.demo.events import make_event
from rewind.demo.producer import ProduceSpec, plan_record

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def corpus() -> tuple[list[bytes | None], list[int | None]]:
    """Valid, duplicate, late, malformed and odd records, with Kafka timestamps (some missing)."""
    import json
    import random

    spec = ProduceSpec(topic="t", count=600, malformed_every=9, late_every=7, duplicate_every=5,
                       late_by=timedelta(seconds=21))
    values: list[bytes | None] = [v for seq in range(600) for _, _, v in plan_record(spec, seq, NOW)]
    odd = [
        None, b"", b" ", b"null", b"[1,2]", b'"s"', b"{}", b"\xff\xfe",
        b"\xef\xbb\xbf" + make_event("p", 1, NOW).encode(),
        b'{"event_id":"a","key":"k","amount":NaN,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":Infinity,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":1e400,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":7,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":-0,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":9007199254740993,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":true,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":"1","event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":null,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":null,"amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":5,"amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":7,"key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"","amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21 12:00:00+01:00"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T13:00:00.1234567+01:00"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-13-21T12:00:00Z"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"20261121T120000Z"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":1763726400}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z","event_id":"b"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z","event_id":null}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z","x":"\xff"}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z","x":"\\ud800"}',
        b'{"event_id":"\\u00e9\\ud83d\\ude00","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        '{"event_id":"é","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}'.encode(),
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z","x":[1,{"y":[]}]}',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"} ',
        b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"} x',
        b'{"event_id":"a\tb","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}',
        json.dumps({"event_id": "a", "key": "k", "amount": 1.5, "event_time": "2026-11-21T12:00:00Z"}).encode("utf-16"),
    ]
    values += odd
    stamps: list[int | None] = [NOW_MS + 10 * i for i in range(len(values))]
    for i in range(0, len(stamps), 13):
        stamps[i] = None
    # lateness right at the limit (20 s): equal is on time, one millisecond more is late
    at = NOW - timedelta(seconds=20)
    for delta_ms in (-1, 0, 1):
        values.append(make_event("edge", delta_ms + 5, at).encode())
        stamps.append(NOW_MS + delta_ms)
    # seeded byte-level mutations of valid records: whatever the mutation, both must agree
    rng = random.Random(6)
    base = [make_event("m", i, NOW).encode() for i in range(40)]
    for _ in range(1500):
        b = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            op, pos = rng.randrange(3), rng.randrange(len(b))
            if op == 0:
                b[pos] = rng.choice(b'{}[]":,.-+0123456789eE \\ntfalseu\x00\x7f\xc3\xa9Z')
            elif op == 1:
                del b[pos]
            else:
                b.insert(pos, rng.choice(b'{}[]":,.-+05eE \\nZ'))
        values.append(bytes(b))
        stamps.append(NOW_MS)
    return values, stamps
