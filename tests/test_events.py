"""The shared classifier and the producer's deterministic plan (pure logic)."""

from datetime import UTC, datetime, timedelta

import pytest
from harness.event_corpus import corpus

from rewind.demo.events import MALFORMED_KINDS, classify, make_event, malformed_payload
from rewind.demo.producer import ProduceSpec, plan_record

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
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


# --- classify_many: the stream's batch classifier must give classify's verdicts, record by record ---

def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    """Verdict equality where NaN amounts count as equal."""
    if a.reason != b.reason or (a.event is None) != (b.event is None):
        return False
    if a.event is None:
        return True
    x, y = a.event, b.event
    amounts = x.amount == y.amount or (x.amount != x.amount and y.amount != y.amount)
    return amounts and (x.event_id, x.key, x.event_time) == (y.event_id, y.key, y.event_time)


def test_classify_many_agrees_with_classify_on_every_record() -> None:
    from rewind.demo.events import classify_many

    values, stamps = corpus()
    lateness = timedelta(seconds=20)
    many = classify_many(values, stamps, lateness)
    verdicts = [classify(v, ms, lateness) for v, ms in zip(values, stamps)]
    wrong = [(i, values[i], verdicts[i], many.verdict(i)) for i in range(len(values))
             if not _same(verdicts[i], many.verdict(i))]
    assert not wrong, wrong[:5]
    kinds = {"event": 0, "late": 0, "other": 0}
    for v in verdicts:
        kinds["event" if v.event else "late" if v.reason.startswith("late") else "other"] += 1
    assert all(kinds.values()), kinds  # the corpus covers events, late records and other dead letters
    assert many.event_time_us[0] == (verdicts[0].event.event_time - datetime(1970, 1, 1, tzinfo=UTC)) \
        // timedelta(microseconds=1)


def test_classify_many_edges() -> None:
    from rewind.demo.events import classify_many

    assert classify_many([], []).reason == []
    with pytest.raises(ValueError, match="timestamps"):
        classify_many([b"{}"], [])
    at = NOW - timedelta(seconds=20)
    many = classify_many([make_event("e", i, at).encode() for i in range(3)], [NOW_MS - 1, NOW_MS, NOW_MS + 1],
                         timedelta(seconds=20))
    assert [r is None for r in many.reason] == [True, True, False] and "late" in many.reason[2]


def test_classify_many_takes_the_fast_path_for_plain_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid on-time events never reach the per-record classify (the stream's speed depends on it)."""
    import rewind.demo.events as events

    if events.msgspec is None:
        pytest.skip("msgspec not installed: every record takes classify")
    calls: list[bytes | None] = []
    real = events.classify
    monkeypatch.setattr(events, "classify", lambda v, *a: calls.append(v) or real(v, *a))
    values = [make_event("f", i, NOW).encode() for i in range(100)] + [b"nope"]
    many = events.classify_many(values, [NOW_MS] * 101)
    assert calls == [b"nope"] and many.reason[:100] == [None] * 100
