"""Unit tests of the Kafka source's pure decisions (no broker, no Spark)."""

from __future__ import annotations

import json
import logging

import pytest

from rewind.errors import EXIT_FAILED, EXIT_REFUSED, Failed, Refused, exit_code_of
from rewind.kafka.offsets import (
    available_now_end,
    check_covers_partitions,
    check_missing_partitions,
    check_start,
    plan_batch_ranges,
    plan_latest,
    plan_ranges,
    rate_limit,
    resolve_offsets,
    resolve_timestamp_offsets,
    specific_offsets_needs,
    split_limit,
    timestamp_targets,
)
from rewind.kafka.options import OffsetSpec, parse_options, validate_options
from rewind.kafka.types import (
    TP,
    DataLossError,
    KafkaAuthenticationError,
    KafkaClientConfigError,
    KafkaSourceOptionError,
    KafkaTimeoutError,
    KafkaUnreachable,
    OffsetRange,
    UnknownTopicError,
    offsets_from_json,
    offsets_json_text,
    offsets_to_json,
)

A0, A1, A2 = TP("a", 0), TP("a", 1), TP("a", 2)
B0 = TP("b", 0)
BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "a,b"}


# -- JSON shape ---------------------------------------------------------------------------------


def test_offsets_json_is_canonical_with_string_partitions() -> None:
    offsets = {TP("b", 0): 5, TP("a", 10): 1, TP("a", 2): 7}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"2": 7, "10": 1}, "b": {"0": 5}}
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["2", "10"]  # numeric partition order
    assert offsets_from_json(json.loads(json.dumps(as_json))) == offsets
    assert offsets_from_json(json.dumps(as_json)) == offsets
    # Same offsets in any insertion order serialize to the same text (Spark compares the text).
    assert offsets_json_text(dict(reversed(list(offsets.items())))) == offsets_json_text(offsets)


@pytest.mark.parametrize("bad, fragment", [
    ("[1]", "JSON object"),
    ('{"a": 1}', "must map partition numbers"),
    ('{"a": {"x": 1}}', "not an integer"),
    ('{"a": {"0": "1"}}', "must be an integer"),
    ('{"a": {"0": true}}', "must be an integer"),
    ("{nope", "not valid JSON"),
])
def test_offsets_from_json_rejects_bad_shapes(bad: str, fragment: str) -> None:
    with pytest.raises(KafkaSourceOptionError, match=fragment):
        offsets_from_json(bad, "option 'startingOffsets'")


# -- option parsing -----------------------------------------------------------------------------


def test_defaults_like_spark() -> None:
    stream = parse_options(BASE, streaming=True)
    assert stream.topics == ("a", "b")
    assert stream.starting.kind == "latest" and stream.ending is None
    assert stream.fail_on_data_loss is True and stream.max_offsets_per_trigger is None
    batch = parse_options(BASE, streaming=False)
    assert batch.starting.kind == "earliest" and batch.ending is not None and batch.ending.kind == "latest"


def test_options_are_case_insensitive_and_kafka_options_pass_through() -> None:
    opts = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": " a , b ,a",
                          "startingOffsets": "EARLIEST", "maxOffsetsPerTrigger": "100",
                          "failOnDataLoss": "False", "kafka.isolation.level": "read_uncommitted",
                          "kafka.fetch.max.bytes": "1000"}, streaming=True)
    assert opts.bootstrap_servers == "h:1" and opts.topics == ("a", "b")
    assert opts.starting.kind == "earliest" and opts.max_offsets_per_trigger == 100
    assert opts.fail_on_data_loss is False
    assert opts.consumer_conf == {"isolation.level": "read_uncommitted", "fetch.max.bytes": "1000"}


def test_starting_offsets_json_with_earliest_and_latest_markers() -> None:
    opts = parse_options({**BASE, "startingOffsets": '{"a": {"0": 42, "1": -2}, "b": {"0": -1}}'}, streaming=True)
    assert opts.starting == OffsetSpec("offsets", "startingOffsets", offsets={A0: 42, A1: -2, B0: -1})


@pytest.mark.parametrize("options, streaming, fragment", [
    ({"subscribe": "a"}, True, "kafka.bootstrap.servers' is required"),
    ({"kafka.bootstrap.servers": "h:1"}, True, "'subscribe' is required"),
    ({**BASE, "subscribe": " , "}, True, "no topic names"),
    ({**BASE, "startingOffsets": "newest"}, True, "startingOffsets.*'earliest' or 'latest' or a JSON"),
    ({**BASE, "startingOffsets": "latest"}, False, "'latest' is not allowed"),
    ({**BASE, "startingOffsets": '{"a": {"0": -1}}'}, False, "-1 \\(latest\\) is not allowed"),
    ({**BASE, "startingOffsets": '{"a": {"0": -3}}'}, True, "offset -3 .* is invalid"),
    ({**BASE, "startingOffsets": '{"zz": {"0": 1}}'}, True, r"names topic\(s\) \['zz'\] that are not in 'subscribe'"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets.*'earliest' is not allowed"),
    ({**BASE, "endingOffsets": '{"a": {"0": -2}}'}, False, "-2 \\(earliest\\) is not allowed"),
    ({**BASE, "endingOffsets": "latest"}, True, "not valid for streaming"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger.*positive integer"),
    ({**BASE, "maxOffsetsPerTrigger": "ten"}, True, "maxOffsetsPerTrigger.*positive integer"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "only valid for streaming"),
    ({**BASE, "failOnDataLoss": "yes"}, True, "failOnDataLoss.*'true' or 'false'"),
    ({**BASE, "startingTimestamp": "soon"}, True, "startingTimestamp.*milliseconds"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, True, "must be >= 0"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "skip"}, True, "'error' or 'latest'"),
    ({**BASE, "kafka.isolation.level": "dirty"}, True, "read_committed' or 'read_uncommitted"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "auto.offset.reset' is not supported.*startingOffsets"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, True, "enable.auto.commit' is not supported"),
    ({**BASE, "subscribePattern": "a.*"}, True, "subscribepattern' is not supported.*subscribe"),
    ({**BASE, "assign": '{"a":[0]}'}, True, "assign' is not supported"),
    ({**BASE, "startingOffset": "earliest"}, True, "unknown option.*startingoffset.*accepted"),
])
def test_invalid_options_name_the_option(options: dict[str, str], streaming: bool, fragment: str) -> None:
    with pytest.raises(KafkaSourceOptionError, match=fragment):
        parse_options(options, streaming=streaming)


def test_validate_options_at_load_time_accepts_options_of_either_kind_of_read() -> None:
    validate_options({**BASE, "maxOffsetsPerTrigger": "10"})          # streaming only: fine at load()
    validate_options({**BASE, "endingOffsets": "latest"})             # batch only: fine at load()
    with pytest.raises(KafkaSourceOptionError, match="maxOffsetsPerTrigger.*positive integer"):
        validate_options({**BASE, "maxOffsetsPerTrigger": "lots"})
    with pytest.raises(KafkaSourceOptionError, match="endingOffsets.*'earliest' is not allowed"):
        validate_options({**BASE, "endingOffsets": "earliest"})
    with pytest.raises(KafkaSourceOptionError, match="kafka.bootstrap.servers"):
        validate_options({"subscribe": "a"})


def test_timestamp_precedence_like_spark() -> None:
    opts = parse_options({**BASE, "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
                          "startingOffsets": "earliest"}, streaming=True)
    assert opts.starting.kind == "timestamp" and opts.starting.timestamp == 1000
    opts = parse_options({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 5}}', "startingOffsets": "earliest"},
                         streaming=True)
    assert opts.starting.kind == "timestamps" and opts.starting.offsets == {A0: 5}


# -- resolving specs --------------------------------------------------------------------------


def test_resolve_specific_offsets_replaces_markers() -> None:
    spec = OffsetSpec("offsets", "startingOffsets", offsets={A0: 42, A1: -2, B0: -1})
    assert specific_offsets_needs(spec) == (True, True)
    got = resolve_offsets(spec, [A0, A1, B0], earliest={A0: 0, A1: 3, B0: 0}, latest={A0: 50, A1: 9, B0: 77})
    assert got == {A0: 42, A1: 3, B0: 77}
    assert specific_offsets_needs(OffsetSpec("offsets", "x", offsets={A0: 4})) == (False, False)
    assert resolve_offsets(OffsetSpec("earliest", "x"), [A0], {A0: 2}, {}) == {A0: 2}
    assert resolve_offsets(OffsetSpec("latest", "x"), [A0], {}, {A0: 9}) == {A0: 9}


def test_specific_offsets_must_cover_every_partition() -> None:
    spec = OffsetSpec("offsets", "startingOffsets", offsets={A0: 1})
    with pytest.raises(KafkaSourceOptionError, match=r"every partition.*missing a\[1\].*-2 for earliest"):
        check_covers_partitions(spec, [A0, A1])
    spec = OffsetSpec("offsets", "startingOffsets", offsets={A0: 1, A2: 1})
    with pytest.raises(KafkaSourceOptionError, match=r"do not exist: a\[2\]"):
        check_covers_partitions(spec, [A0])


def test_timestamps_resolve_and_fall_back() -> None:
    spec = OffsetSpec("timestamp", "startingTimestamp", timestamp=1000)
    assert timestamp_targets(spec, [A0, A1]) == {A0: 1000, A1: 1000}
    found = {A0: 7, A1: None}
    with pytest.raises(KafkaSourceOptionError, match=r"no record at or after timestamp 1000 in a\[1\]"):
        resolve_timestamp_offsets(spec, found, {A0: 9, A1: 4}, "error", starting=True)
    assert resolve_timestamp_offsets(spec, found, {A0: 9, A1: 4}, "latest", starting=True) == {A0: 7, A1: 4}
    # An ending timestamp with no later record means "to the end".
    assert resolve_timestamp_offsets(spec, found, {A0: 9, A1: 4}, "error", starting=False) == {A0: 7, A1: 4}


# -- data loss ----------------------------------------------------------------------------------


def test_start_below_earliest_is_data_loss() -> None:
    with pytest.raises(DataLossError, match=r"a partition 0: requested offset 5 is below the earliest available "
                                            r"offset 10.*failOnDataLoss=false"):
        check_start(A0, 5, earliest=10, end=20, fail_on_data_loss=True)


def test_start_below_earliest_without_fail_reads_from_earliest(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert check_start(A0, 5, earliest=10, end=20, fail_on_data_loss=False) == 10
    assert "requested offset 5 is below the earliest" in caplog.text


def test_start_beyond_end_is_data_loss() -> None:
    with pytest.raises(DataLossError, match=r"requested offset 30 is beyond the partition's end offset 20 "
                                            r"\(earliest 0\).*recreated"):
        check_start(A0, 30, earliest=0, end=20, fail_on_data_loss=True)
    # Without failOnDataLoss: on from the end, like Spark's connector (a truncated partition is not read twice).
    assert check_start(A0, 30, earliest=0, end=20, fail_on_data_loss=False) == 20
    assert check_start(A0, 20, earliest=0, end=20, fail_on_data_loss=True) == 20  # at the end is fine


def test_deleted_partitions() -> None:
    with pytest.raises(DataLossError, match=r"b\[0\] no longer exist"):
        check_missing_partitions({A0: 1, B0: 2}, [A0], fail_on_data_loss=True)
    assert check_missing_partitions({A0: 1, B0: 2}, [A0], fail_on_data_loss=False) == [B0]
    assert check_missing_partitions({A0: 1}, [A0, A1], fail_on_data_loss=True) == []


# -- rate limit ---------------------------------------------------------------------------------


def test_split_limit_is_proportional_exact_and_deterministic() -> None:
    backlog = {A0: 600, A1: 300, A2: 100}
    assert split_limit(100, backlog) == {A0: 60, A1: 30, A2: 10}
    got = split_limit(10, {A0: 5, A1: 5, A2: 5})
    assert sum(got.values()) == 10 and got == {A0: 4, A1: 3, A2: 3}  # ties break by partition
    assert split_limit(10, {A0: 5, A1: 5, A2: 5}) == got


def test_split_limit_does_not_starve_small_partitions() -> None:
    got = split_limit(100, {A0: 1_000_000, A1: 1, B0: 2})
    assert got[A1] == 1 and got[B0] >= 1 and sum(got.values()) == 100


def test_split_limit_smaller_than_partition_count() -> None:
    got = split_limit(2, {A0: 5, A1: 50, A2: 50})
    assert got == {A0: 0, A1: 1, A2: 1}


def test_split_limit_with_enough_room_takes_everything() -> None:
    assert split_limit(1000, {A0: 5, A1: 0, A2: 7}) == {A0: 5, A1: 0, A2: 7}


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 10, 99, 100, 101, 1000, 5000])
def test_split_limit_invariants(limit: int) -> None:
    backlog = {A0: 1, A1: 17, A2: 0, B0: 1234, TP("c", 0): 3}
    got = split_limit(limit, backlog)
    assert sum(got.values()) == min(limit, sum(backlog.values()))
    assert all(0 <= got[tp] <= backlog[tp] for tp in backlog)
    if limit >= 4:  # four partitions have a backlog: each gets at least one offset
        assert all(got[tp] >= 1 for tp, b in backlog.items() if b > 0)


def test_split_limit_random_invariants() -> None:
    import random

    rng = random.Random(7)
    for _ in range(500):
        backlog = {TP(f"t{i % 3}", i): rng.choice([0, 1, 2, 5, 50, 10_000, rng.randint(0, 100_000)])
                   for i in range(rng.randint(1, 12))}
        limit = rng.randint(0, 20_000)
        got = split_limit(limit, backlog)
        assert got == split_limit(limit, dict(reversed(list(backlog.items()))))  # order-independent
        assert sum(got.values()) == min(limit, sum(backlog.values()))
        assert all(0 <= got[tp] <= backlog[tp] for tp in backlog)
        busy = [tp for tp, b in backlog.items() if b > 0]
        if limit >= len(busy):
            assert all(got[tp] >= 1 for tp in busy)


def test_rate_limit_never_goes_behind_start_nor_beyond_end() -> None:
    start = {A0: 100, A1: 50, A2: 10}
    end = {A0: 1100, A1: 50, A2: 20}
    got = rate_limit(start, end, 55)
    assert got[A1] == 50 and 100 <= got[A0] <= 1100 and 10 <= got[A2] <= 20
    assert sum(got[tp] - start[tp] for tp in start) == 55
    assert rate_limit(start, end, 10_000) == end


# -- planning -----------------------------------------------------------------------------------


def test_plan_latest_new_partitions_start_at_earliest_and_count_in_the_limit() -> None:
    start = {A0: 10}
    ends = {A0: 110, A1: 105}
    got = plan_latest(start, ends, earliest={A0: 0, A1: 5}, limit=100, fail_on_data_loss=True)
    assert got == {A0: 60, A1: 55}
    assert plan_latest(start, ends, earliest={A0: 0, A1: 5}, limit=None, fail_on_data_loss=True) == ends


def test_plan_latest_checks_data_loss() -> None:
    with pytest.raises(DataLossError, match="below the earliest"):
        plan_latest({A0: 3}, {A0: 50}, earliest={A0: 10}, limit=None, fail_on_data_loss=True)
    # Without failOnDataLoss a truncated or recreated partition (end behind start) goes on from its end.
    got = plan_latest({A0: 80, A1: 0}, {A0: 30, A1: 50}, earliest={A0: 0, A1: 0}, limit=10, fail_on_data_loss=False)
    assert got == {A0: 30, A1: 10}


def test_plan_latest_no_new_data_returns_start_unchanged() -> None:
    start = {A0: 5, B0: 9}
    assert plan_latest(start, dict(start), earliest={}, limit=10, fail_on_data_loss=True) == start


def test_plan_ranges_skips_empty_and_handles_new_partitions() -> None:
    ranges = plan_ranges({A0: 10, A1: 7}, {A0: 20, A1: 7, A2: 4}, earliest={A0: 0, A2: 1}, fail_on_data_loss=True)
    assert ranges == [OffsetRange("a", 0, 10, 20), OffsetRange("a", 2, 1, 4)]
    assert ranges[0].size == 10


def test_plan_ranges_data_loss() -> None:
    with pytest.raises(DataLossError, match=r"a partition 0: requested offset 2 is below the earliest .* offset 5"):
        plan_ranges({A0: 2}, {A0: 20}, earliest={A0: 5}, fail_on_data_loss=True)
    assert plan_ranges({A0: 2}, {A0: 20}, earliest={A0: 5}, fail_on_data_loss=False) == [OffsetRange("a", 0, 5, 20)]
    # End behind start (without failOnDataLoss latestOffset logged the partition's end): nothing to read.
    assert plan_ranges({A0: 80}, {A0: 10}, earliest={A0: 0}, fail_on_data_loss=False) == []


def test_plan_batch_ranges() -> None:
    earliest, latest = {A0: 0, A1: 0}, {A0: 100, A1: 50}
    got = plan_batch_ranges({A0: 10, A1: 50}, {A0: 20, A1: 50}, earliest, latest, True)
    assert got == [OffsetRange("a", 0, 10, 20)]
    for fail in (True, False):  # a batch read never starts beyond the end (like Spark's connector)
        with pytest.raises(DataLossError, match=r"beyond the partition's end offset 100"):
            plan_batch_ranges({A0: 200, A1: 0}, {A0: 100, A1: 50}, earliest, latest, fail)
    with pytest.raises(DataLossError, match=r"endingOffsets for a partition 0 is 300 but the partition ends at 100"):
        plan_batch_ranges({A0: 0, A1: 0}, {A0: 300, A1: 50}, earliest, latest, True)
    with pytest.raises(KafkaSourceOptionError, match=r"below startingOffsets"):
        plan_batch_ranges({A0: 30, A1: 0}, {A0: 20, A1: 50}, earliest, latest, True)


def test_available_now_end_never_exceeds_target() -> None:
    target = {A0: 100, A1: 50}
    assert available_now_end({A0: 10, A1: 50}, target) == {A0: 100, A1: 50}
    # A partition the query already reads but that the target lacks stays where it is.
    assert available_now_end({A0: 10, B0: 7}, target) == {A0: 100, A1: 50, B0: 7}


@pytest.mark.parametrize("error, kind, builtin", [
    (KafkaSourceOptionError, Refused, ValueError),
    (UnknownTopicError, Refused, ValueError),
    (KafkaClientConfigError, Refused, ValueError),
    (KafkaAuthenticationError, Refused, KafkaUnreachable),
    (KafkaUnreachable, Failed, ConnectionError),
    (KafkaTimeoutError, Failed, TimeoutError),
    (DataLossError, Failed, RuntimeError),
])
def test_kafka_errors_are_rewind_errors_and_keep_their_builtin_base(error: type, kind: type, builtin: type) -> None:
    exc = error("the message")
    assert isinstance(exc, kind) and isinstance(exc, builtin) and str(exc) == "the message"
    assert exit_code_of(exc) == (EXIT_REFUSED if kind is Refused else EXIT_FAILED)
    assert exc.retry is (kind is Failed)
