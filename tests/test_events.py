"""The shared classifier and the producer's deterministic plan (pure logic)."""

from datetime import datetime, timedelta, timezone

import pytest

from rewind.demo.events import MALFORMED_KINDS, classify, make_event, malformed_payload
from rewind.producer import ProduceSpec, plan_record

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)


def test_valid_event_round_trips() -> None:
    ev = make_event("p", 42, NOW)
    verdict = classify(ev.encode(), NOW_MS)
    assert verdict.reason is None and verdict.event == ev


@pytest.mark.parametrize("seq", range(len(MALFORMED_KINDS)))
def test_every_malformed_kind_gets_a_reason(seq: int) -> None:
    verdict = classify(malformed_payload(seq), NOW_MS)
    assert verdict.event is None and verdict.reason


@pytest.mark.parametrize("value,reason", [
    (b"", "malformed JSON"), (b"[1,2]", "not a JSON object"), (None, "empty value"),
    (b'{"event_id":"a","key":"k","amount":true,"event_time":"2026-11-21T12:00:00Z"}', "amount must be a number"),
    (b'{"event_id":"","key":"k","amount":1,"event_time":"2026-11-21T12:00:00Z"}', "event_id"),
    (b'{"event_id":"a","amount":1,"event_time":"2026-11-21T12:00:00Z"}', "missing field(s): key"),
    (b'{"event_id":"a","key":"k","amount":1,"event_time":"2026-11-21T12:00:00"}', "with a zone"),
    (b'\xff\xfe', "malformed JSON"),
])
def test_reasons_name_the_problem(value: bytes | None, reason: str) -> None:
    assert reason in (classify(value, NOW_MS).reason or "")


def test_late_is_relative_to_kafka_timestamp() -> None:
    old = make_event("p", 1, NOW - timedelta(seconds=25))
    assert "late" in (classify(old.encode(), NOW_MS, timedelta(seconds=20)).reason or "")
    assert classify(old.encode(), NOW_MS, timedelta(seconds=30)).event is not None
    assert classify(old.encode(), None).event is not None  # no Kafka timestamp: cannot judge lateness


def test_producer_plan_is_deterministic_and_injects_faults() -> None:
    spec = ProduceSpec(topic="t", count=1000, malformed_every=10, late_every=7, duplicate_every=5)
    kinds = [k for seq in range(1000) for k, _, _ in plan_record(spec, seq, NOW)]
    assert kinds.count("malformed") == 100
    assert kinds.count("duplicate") > 0 and kinds.count("late") > 0
    again = [v for seq in range(50) for _, _, v in plan_record(spec, seq, NOW)]
    assert again == [v for seq in range(50) for _, _, v in plan_record(spec, seq, NOW)]
    dup = plan_record(spec, 4, NOW)
    assert [k for k, _, _ in dup] == ["event", "duplicate"] and dup[0][2] == dup[1][2]


@pytest.mark.parametrize("kwargs,msg", [({"count": -1}, "--count"), ({"rate": -1}, "--rate"),
                                        ({"partitions": 0}, "--partitions"), ({"topic": ""}, "--topic")])
def test_producer_refuses_bad_parameters(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        ProduceSpec(**{"topic": "t", "count": 1, **kwargs}).validate()
