"""The replay planner: pure rules without services, then plans over real Apache Kafka topics, then the CLI."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rewind.kafka.types import TP
from rewind.registry import load_registry
from rewind.replay.plan import ReplayPlan, apply_count, decide_partition, format_plan
from rewind.replay.planner import plan_replay
from rewind.replay.problems import Problem, ReplayRefused
from rewind.replay.request import Bound, ReplayRequest, parse_bound, select_partitions, validate_request

REWIND = Path(sys.executable).parent / "rewind"
BASE = datetime(2026, 1, 1, tzinfo=UTC)   # record timestamps: BASE + i seconds


def write_registry(tmp_path: Path, topics: list[str], name: str = "rp") -> Path:
    from tests.harness.registry_templates import demo_stream
    from tests.harness.registry_templates import write_registry as write

    return write(tmp_path / "streams.yaml", demo_stream(name, topics, tmp_path, sink_url=f"sqlite:///{tmp_path}/sink.db"))


def kinds(exc: pytest.ExceptionInfo[ReplayRefused]) -> list[str]:
    return [p.kind for p in exc.value.problems]


# ---------------------------------------------------------------------------------------------
# Pure: parsing
# ---------------------------------------------------------------------------------------------


def test_parse_bound_offsets_keywords_and_timestamps_with_zone() -> None:
    assert parse_bound("12") == Bound("offset", "12", offset=12)
    assert parse_bound(" 0 ").offset == 0
    assert parse_bound("earliest").kind == "earliest" and parse_bound("LATEST").kind == "latest"
    utc = parse_bound("2026-11-22T03:00:00Z")
    assert utc.kind == "timestamp" and utc.timestamp == datetime(2026, 11, 22, 3, tzinfo=UTC)
    plus1 = parse_bound("2026-11-22T04:00:00+01:00")
    assert plus1.timestamp_ms == utc.timestamp_ms  # the same instant
    per = parse_bound('{"t": {"0": 12, "1": 40}}')
    assert per.kind == "offsets" and per.offsets == {TP("t", 0): 12, TP("t", 1): 40}


@pytest.mark.parametrize("text, kind, says", [
    ("2026-11-22T03:00:00", "timestamp_without_zone", ["no time zone", "Z", "+01:00", "2026-11-22T03:00:00Z"]),
    ("2026-11-22", "timestamp_without_zone", ["2026-11-22T00:00:00Z"]),
    ("-5", "bad_bound", [">= 0"]),
    ("yesterday", "bad_bound", ["ISO 8601", "2026-11-22T03:00:00Z"]),
    ('{"t": {"x": 1}}', "bad_bound", ["not an integer"]),
    ('{"t": {"0": -3}}', "bad_bound", ["negative"]),
    ("{}", "bad_bound", ["names no partition"]),
])
def test_parse_bound_refuses_with_what_to_change(text: str, kind: str, says: list[str]) -> None:
    with pytest.raises(ReplayRefused) as exc:
        parse_bound(text, "--from")
    assert kinds(exc) == [kind]
    for s in says:
        assert s in str(exc.value)


def test_request_lists_every_problem_not_only_the_first() -> None:
    with pytest.raises(ReplayRefused) as exc:
        ReplayRequest.parse("s", "2026-11-22T03:00:00", "soon", partitions="0,x")
    assert kinds(exc) == ["timestamp_without_zone", "bad_bound", "bad_partition"]
    assert "3 problems" in str(exc.value) and "--partitions" in str(exc.value)


def test_from_after_to_is_refused_before_kafka_for_comparable_bounds() -> None:
    with pytest.raises(ReplayRefused) as exc:
        ReplayRequest.parse("s", "10", "5")
    assert kinds(exc) == ["from_after_to"] and "swap" in str(exc.value)
    with pytest.raises(ReplayRefused) as exc:
        ReplayRequest.parse("s", "2026-11-22T04:00:00Z", "2026-11-22T04:00:00+02:00")  # 02:00Z
    assert kinds(exc) == ["from_after_to"]
    req = ReplayRequest.parse("s", "5", "5", topics="a, b,a", partitions="2,0,2")
    assert req.topics == ("a", "b") and req.partitions == (0, 2)


def test_request_checks_stream_and_topics_against_the_registry(tmp_path: Path) -> None:
    registry = load_registry(write_registry(tmp_path, ["events", "clicks"]))
    with pytest.raises(ReplayRefused) as exc:
        ReplayRequest.parse("nope", "0", "10", registry=registry)
    assert kinds(exc) == ["unknown_stream"] and "known streams: rp" in str(exc.value)
    with pytest.raises(ReplayRefused) as exc:  # bad bound and unknown topic reported together
        ReplayRequest.parse("rp", "2026-01-01T00:00:00", "10", topics="events,orders", registry=registry)
    assert kinds(exc) == ["timestamp_without_zone", "unknown_topic"]
    assert "its topics: events, clicks" in str(exc.value)
    req = ReplayRequest.parse("rp", "0", '{"orders": {"0": 3}}')
    with pytest.raises(ReplayRefused) as exc:
        validate_request(req, registry)
    assert kinds(exc) == ["unknown_topic"]
    assert validate_request(ReplayRequest.parse("rp", "0", "1"), registry).name == "rp"


# ---------------------------------------------------------------------------------------------
# Pure: selection and range rules
# ---------------------------------------------------------------------------------------------


def test_select_partitions_unknown_partition_lists_what_the_topic_has() -> None:
    req = ReplayRequest.parse("s", "0", "1", partitions="0,7")
    tps, problems = select_partitions(req, ["t"], {"t": [0, 1, 2]})
    assert tps == [TP("t", 0)]
    assert [p.kind for p in problems] == ["unknown_partition"]
    assert "no partition 7" in problems[0].message and "partitions: 0, 1, 2" in problems[0].message
    _, problems = select_partitions(ReplayRequest.parse("s", "0", "1"), ["t", "gone"], {"t": [0], "gone": None})
    assert [p.kind for p in problems] == ["unknown_topic"] and "does not exist on Kafka" in problems[0].message


def test_select_partitions_json_bounds_select_and_must_agree() -> None:
    req = ReplayRequest.parse("s", '{"t": {"1": 3}}', "latest")
    assert select_partitions(req, ["t"], {"t": [0, 1, 2]}) == ([TP("t", 1)], [])
    req = ReplayRequest.parse("s", '{"t": {"1": 3}}', '{"t": {"1": 9, "2": 4}}')
    _, problems = select_partitions(req, ["t"], {"t": [0, 1, 2]})
    assert [p.kind for p in problems] == ["bound_mismatch"] and "t-2" in problems[0].message
    req = ReplayRequest.parse("s", '{"t": {"1": 3}}', "latest", partitions="1,2")
    _, problems = select_partitions(req, ["t"], {"t": [0, 1, 2]})
    assert [p.kind for p in problems] == ["bound_mismatch"] and "--from gives no offset for t-2" in problems[0].message


def test_decide_partition_rules() -> None:
    tp = TP("t", 0)
    ok = decide_partition(tp, 10, 20, earliest=5, high=30)
    assert (ok.start, ok.end, ok.records, ok.problems) == (10, 20, 10, [])
    assert decide_partition(tp, 10, 30, 5, 30).problems == []  # end == high is fine (exclusive)

    late = decide_partition(tp, 10, 31, 5, 30)
    assert [p.kind for p in late.problems] == ["after_high_watermark"]
    assert "30 now" in late.problems[0].message and "--to 30" in late.problems[0].message

    gone = decide_partition(tp, 2, 20, 5, 30)
    assert [(p.kind, p.severity) for p in gone.problems] == [("before_retention", "error")]
    assert "earliest offset still retained is 5" in gone.problems[0].message
    assert "--from 5" in gone.problems[0].message and "--allow-beyond-retention" in gone.problems[0].message

    allowed = decide_partition(tp, 2, 20, 5, 30, allow_beyond_retention=True)
    assert (allowed.start, allowed.missing, allowed.records) == (5, 3, 15)
    assert [(p.kind, p.severity) for p in allowed.problems] == [("before_retention", "warning")]
    all_gone = decide_partition(tp, 0, 4, 5, 30, allow_beyond_retention=True)
    assert (all_gone.start, all_gone.end, all_gone.missing) == (4, 4, 4)
    assert [p.kind for p in all_gone.problems] == ["before_retention", "empty"]

    backwards = decide_partition(tp, 12, 8, 0, 30)
    assert [p.kind for p in backwards.problems] == ["from_after_to"]

    empty = decide_partition(tp, 7, 7, 0, 30)
    assert [(p.kind, p.severity) for p in empty.problems] == [("empty", "info")] and empty.exact

    clamped = decide_partition(tp, 10, 30, 0, 30, end_in_future=True)
    assert [(p.kind, p.severity) for p in clamped.problems] == [("end_clamped", "info")]


def test_counts_plan_json_and_table() -> None:
    a = apply_count(decide_partition(TP("t", 0), 0, 18, 0, 18), 15, 0, 16)
    markers_only = apply_count(decide_partition(TP("t", 1), 5, 6, 0, 18), 0, None, None)
    assert [p.kind for p in markers_only.problems] == ["empty"] and "transaction markers" in \
        markers_only.problems[0].message
    uncounted = decide_partition(TP("u", 0), 3, 9, 0, 10)
    plan = ReplayPlan("rp", "0", "latest", [a, markers_only, uncounted],
                      [p for x in (a, markers_only, uncounted) for p in x.problems])
    assert plan.starting_offsets_json() == '{"t":{"0":0,"1":5},"u":{"0":3}}'
    assert plan.ending_offsets_json() == '{"t":{"0":18,"1":6},"u":{"0":9}}'
    assert (plan.total_records, plan.total_offsets, plan.exact) == (21, 25, False)
    doc = plan.to_json()
    assert doc["startingOffsets"] == {"t": {"0": 0, "1": 5}, "u": {"0": 3}}
    assert ReplayPlan.from_json(json.dumps(doc)).to_json() == doc
    table = format_plan(plan)
    assert "[0, 18)" in table and "<= 6" in table and "upper bound" in table and "at most 21" in table
    err = ReplayRefused([Problem("unknown_partition", "no partition 7")])
    assert pickle.loads(pickle.dumps(err)).problems == err.problems


def test_replay_errors_are_rewind_errors() -> None:
    """Refusals are ``Refused`` (exit 3, no retry) and still ValueErrors; failures ``Failed``; a
    failing proof a ``ProofViolation`` that still carries the report like any ``ReplayFailed``."""
    from rewind.errors import EXIT_PROOF_VIOLATION, EXIT_REFUSED, Failed, ProofViolation, Refused
    from rewind.replay.guard import ReplayBusy
    from rewind.replay.report import ReplayFailed, ReplayProofFailed

    refused = ReplayRefused([Problem("bad_bound", "x")])
    assert isinstance(refused, Refused) and isinstance(refused, ValueError) and refused.exit_code == EXIT_REFUSED
    assert issubclass(ReplayBusy, Refused) and issubclass(ReplayFailed, Failed)
    proof = ReplayProofFailed("proof failed", None)  # type: ignore[arg-type]
    assert isinstance(proof, ProofViolation) and isinstance(proof, ReplayFailed) and proof.report is None
    assert proof.exit_code == EXIT_PROOF_VIOLATION and not proof.retry


# ---------------------------------------------------------------------------------------------
# Real topics (Apache Kafka)
# ---------------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partition: int, n: int, *, ts0: datetime | None = None,
            one_batch_each: bool = False) -> None:
    """``n`` records; record i has timestamp ts0 + i s when given (deterministic timestamp ranges)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if one_batch_each else 5, "log_level": 3})
    for i in range(n):
        kwargs: dict[str, Any] = {}
        if ts0 is not None:
            kwargs["timestamp"] = int((ts0 + timedelta(seconds=i)).timestamp() * 1000)
        p.produce(topic, value=f"{partition}-{i}".encode(), partition=partition, **kwargs)
        if one_batch_each:
            p.flush(10)
    assert p.flush(15) == 0


def produce_transactions(bootstrap: str, topic: str, transactions: int, per_txn: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"rp-{uuid.uuid4().hex[:8]}",
                  "log_level": 3})
    p.init_transactions(30)
    for t in range(transactions):
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=f"{t}-{i}".encode(), partition=0)
        p.commit_transaction(30)


def plan(bootstrap: str, registry: Path, start: str, end: str, **kwargs: Any) -> ReplayPlan:
    reg = load_registry(registry)
    opts = {k: kwargs.pop(k) for k in ("topics", "partitions", "allow_beyond_retention") if k in kwargs}
    return plan_replay(ReplayRequest.parse("rp", start, end, registry=reg, **opts), reg, bootstrap, **kwargs)


def rows(p: ReplayPlan) -> list[tuple[int, int, int, int]]:
    return [(x.partition, x.start, x.end, x.records) for x in p.partitions]


def test_offset_ranges_over_all_partitions(kafka_bootstrap: str, new_topic: Callable[..., str],
                                           tmp_path: Path) -> None:
    topic = new_topic(2)
    produce(kafka_bootstrap, topic, 0, 10)
    produce(kafka_bootstrap, topic, 1, 6)
    reg = write_registry(tmp_path, [topic])
    p = plan(kafka_bootstrap, reg, "2", "6")
    assert rows(p) == [(0, 2, 6, 4), (1, 2, 6, 4)] and p.exact and p.total_records == 8
    assert [(x.first_offset, x.last_offset) for x in p.partitions] == [(2, 5), (2, 5)]
    assert p.starting_offsets_json() == json.dumps({topic: {"0": 2, "1": 2}}, separators=(",", ":"))
    assert p.ending_offsets_json() == json.dumps({topic: {"0": 6, "1": 6}}, separators=(",", ":"))
    whole = plan(kafka_bootstrap, reg, "earliest", "latest")
    assert rows(whole) == [(0, 0, 10, 10), (1, 0, 6, 6)]  # the true ends, not ListOffsets(latest)
    assert [(x.earliest, x.high) for x in whole.partitions] == [(0, 10), (0, 6)]


def test_timestamp_ranges(kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(2)
    produce(kafka_bootstrap, topic, 0, 10, ts0=BASE)
    produce(kafka_bootstrap, topic, 1, 10, ts0=BASE + timedelta(seconds=5))  # p1 is 5 s later
    reg = write_registry(tmp_path, [topic])
    # [BASE+3s, BASE+7s): on p0 offsets 3..6; on p1 (records at 5..14 s) offsets 0..1; +01:00 == Z
    p = plan(kafka_bootstrap, reg, "2026-01-01T00:00:03Z", "2026-01-01T01:00:07+01:00")
    assert rows(p) == [(0, 3, 7, 4), (1, 0, 2, 2)]
    between = plan(kafka_bootstrap, reg, "2026-01-01T00:00:02.500Z", "2026-01-01T00:00:06.500Z", partitions="0")
    assert rows(between) == [(0, 3, 7, 4)]
    future = plan(kafka_bootstrap, reg, "2026-01-01T00:00:08Z", "2999-01-01T00:00:00Z")
    assert rows(future) == [(0, 8, 10, 2), (1, 3, 10, 7)]
    assert {pr.kind for pr in future.problems} == {"end_clamped"}
    after_all = plan(kafka_bootstrap, reg, "2026-01-01T00:01:00Z", "2999-01-01T00:00:00Z")
    assert rows(after_all) == [(0, 10, 10, 0), (1, 10, 10, 0)] and after_all.empty
    assert {pr.kind for pr in after_all.problems} == {"empty", "end_clamped"}
    mixed = plan(kafka_bootstrap, reg, "1", "2026-01-01T00:00:06Z")  # offset start, timestamp end
    assert rows(mixed) == [(0, 1, 6, 5), (1, 1, 1, 0)]


def test_partial_partitions_and_per_partition_json(kafka_bootstrap: str, new_topic: Callable[..., str],
                                                  tmp_path: Path) -> None:
    topic = new_topic(3)
    for part in range(3):
        produce(kafka_bootstrap, topic, part, 5 + part)
    reg = write_registry(tmp_path, [topic])
    assert rows(plan(kafka_bootstrap, reg, "1", "latest", partitions="0,2")) == [(0, 1, 5, 4), (2, 1, 7, 6)]
    js = plan(kafka_bootstrap, reg, json.dumps({topic: {"1": 1}}), json.dumps({topic: {"1": -1}}))
    assert rows(js) == [(1, 1, 6, 5)]
    assert js.ending_offsets_json() == json.dumps({topic: {"1": 6}}, separators=(",", ":"))


def test_transaction_markers_are_not_counted_as_records(kafka_bootstrap: str, new_topic: Callable[..., str],
                                                        tmp_path: Path) -> None:
    topic = new_topic(1)
    produce_transactions(kafka_bootstrap, topic, transactions=3, per_txn=5)  # data at 0-4, 6-10, 12-16
    reg = write_registry(tmp_path, [topic])
    whole = plan(kafka_bootstrap, reg, "earliest", "latest")
    (part,) = whole.partitions
    assert part.records == 15 and part.end == part.high >= 17 and part.exact  # not end - start
    assert (part.first_offset, part.last_offset) == (0, 16)
    middle = plan(kafka_bootstrap, reg, "3", "13")
    assert rows(middle) == [(0, 3, 13, 8)]  # 3-4, 6-10, 12
    assert (middle.partitions[0].first_offset, middle.partitions[0].last_offset) == (3, 12)
    marker = plan(kafka_bootstrap, reg, "5", "6")
    assert rows(marker) == [(0, 5, 6, 0)] and [pr.kind for pr in marker.problems] == ["empty"]
    capped = plan(kafka_bootstrap, reg, "earliest", "latest", count_cap=5)
    assert not capped.exact and capped.total_records == part.end  # an upper bound, said so
    assert "<= " in format_plan(capped) and "not counted" in format_plan(capped)
    assert "not part of this replay" in format_plan(plan(kafka_bootstrap, reg, "0", "2999-01-01T00:00:00Z"))


def test_beyond_retention(platform: Any, kafka_bootstrap: str, new_topic: Callable[..., str],
                          tmp_path: Path) -> None:
    """Retention deleting the oldest records is what DeleteRecords does: ListOffsets(earliest) then
    answers the first offset still retained."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic(1)
    produce(kafka_bootstrap, topic, 0, 10, one_batch_each=True)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        fut.result(timeout=30)
    reg = write_registry(tmp_path, [topic])
    with pytest.raises(ReplayRefused) as exc:
        plan(kafka_bootstrap, reg, "0", "latest")
    assert kinds(exc) == ["before_retention"]
    assert "earliest offset still retained is 3" in str(exc.value) and "--allow-beyond-retention" in str(exc.value)
    allowed = plan(kafka_bootstrap, reg, "0", "latest", allow_beyond_retention=True)
    assert rows(allowed) == [(0, 3, 10, 7)] and allowed.missing == 3
    assert "3 offsets missing" in format_plan(allowed) and "missing: 3 offsets" in format_plan(allowed)
    assert rows(plan(kafka_bootstrap, reg, "3", "latest")) == [(0, 3, 10, 7)]


def test_refusals_over_real_topics_list_every_problem(kafka_bootstrap: str, new_topic: Callable[..., str],
                                                      tmp_path: Path) -> None:
    topic = new_topic(2)
    produce(kafka_bootstrap, topic, 0, 5)
    produce(kafka_bootstrap, topic, 1, 3)
    reg = write_registry(tmp_path, [topic, "rp-not-created"])
    with pytest.raises(ReplayRefused) as exc:
        plan(kafka_bootstrap, reg, "0", "100", topics=topic)
    assert kinds(exc) == ["after_high_watermark", "after_high_watermark"]
    assert "which is 5 now" in str(exc.value) and "which is 3 now" in str(exc.value)
    with pytest.raises(ReplayRefused) as exc:
        plan(kafka_bootstrap, reg, "0", "1", topics=topic, partitions="0,7")
    assert kinds(exc) == ["unknown_partition"] and "its partitions: 0, 1" in str(exc.value)
    with pytest.raises(ReplayRefused) as exc:
        plan(kafka_bootstrap, reg, "4", "earliest", topics=topic)
    assert kinds(exc) == ["from_after_to", "from_after_to"]
    with pytest.raises(ReplayRefused) as exc:
        plan(kafka_bootstrap, reg, "0", "1")
    assert kinds(exc) == ["unknown_topic"] and "rp-not-created" in str(exc.value)
    empty = plan(kafka_bootstrap, reg, "2", "2", topics=topic)
    assert rows(empty) == [(0, 2, 2, 0), (1, 2, 2, 0)] and [p.kind for p in empty.problems] == ["empty", "empty"]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REWIND_HOME": str(tmp_path / "home")}
    env.pop("REWIND_KAFKA_BOOTSTRAP", None)
    return subprocess.run([str(REWIND), "replay", "plan", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_cli_plan_json(kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(2)
    produce(kafka_bootstrap, topic, 0, 4)
    produce(kafka_bootstrap, topic, 1, 2)
    reg = write_registry(tmp_path, [topic])
    res = run_cli(tmp_path, "rp", "--from", "1", "--to", "latest", "--json", "--bootstrap", kafka_bootstrap,
                  "--registry", str(reg))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["startingOffsets"] == {topic: {"0": 1, "1": 1}}
    assert doc["endingOffsets"] == {topic: {"0": 4, "1": 2}}
    assert (doc["total_records"], doc["exact"]) == (4, True)
    text = run_cli(tmp_path, "rp", "--from", "1", "--to", "latest", "--partitions", "0", "--bootstrap",
                   kafka_bootstrap, "--registry", str(reg))
    assert text.returncode == 0 and "[1, 4)" in text.stdout and "nothing was written" in text.stdout


def test_cli_bad_input_exits_2_with_the_message_and_needs_no_kafka(tmp_path: Path) -> None:
    reg = write_registry(tmp_path, ["events"])
    res = run_cli(tmp_path, "nope", "--from", "2026-11-22T03:00:00", "--to", "5", "--registry", str(reg))
    assert res.returncode == 3 and res.stdout == ""
    assert "no time zone" in res.stderr and "2026-11-22T03:00:00Z" in res.stderr
    assert "'nope' is not in the registry" in res.stderr and "known streams: rp" in res.stderr
    res = run_cli(tmp_path, "rp", "--from", "9", "--to", "3", "--registry", str(reg), "--json")
    assert res.returncode == 3 and "swap" in res.stderr
    assert json.loads(res.stdout)["problems"][0]["kind"] == "from_after_to"


def test_repeats_counts_identities_an_earlier_chunk_output() -> None:
    """A duplicate whose copies fall in different chunks is a repeat in the later chunk, once per copy;
    identities new to the replay are not, whatever their order or the columns' types."""
    import numpy as np
    import pandas as pd

    from rewind.replay.chunks import _repeats

    earlier = np.empty(0, dtype=np.uint64)
    first = pd.DataFrame({"event_id": ["a", "b", "c"], "amount": [1.0, 2.0, 3.0]})
    n, earlier = _repeats(first, ("event_id",), earlier)
    assert n == 0 and len(earlier) == 3
    second = pd.DataFrame({"event_id": ["d", "b", "e", "a"], "amount": [4.0, 9.0, 5.0, 1.0]})
    n, earlier = _repeats(second, ("event_id",), earlier)
    assert n == 2 and len(earlier) == 7
    coords = ("topic", "partition", "offset")
    rows = pd.DataFrame({"topic": ["t", "t"], "partition": [0, 1], "offset": [5, 5]})
    n, seen = _repeats(rows, coords, np.empty(0, dtype=np.uint64))
    n2, _ = _repeats(pd.DataFrame({"topic": ["t", "t"], "partition": [1, 2], "offset": [5, 5]}), coords, seen)
    assert (n, n2) == (0, 1)
    assert _repeats(None, ("event_id",), earlier) == (0, earlier)
    assert _repeats(first.iloc[0:0], ("event_id",), earlier)[0] == 0
