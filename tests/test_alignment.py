"""Event-time alignment at admission (rewind/kafka/alignment.py): the pure decisions."""

from __future__ import annotations

import pytest

from rewind.kafka.alignment import Alignment, cap_ends, horizon_ms, parse_alignment, probe_positions
from rewind.kafka.options import parse_options
from rewind.kafka.types import TP, KafkaSourceOptionError

A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)
NOW = 10_000_000


def test_options_parse_and_refuse() -> None:
    assert parse_alignment({}, True) is None
    assert parse_alignment({"eventtimealignment.maxdriftms": "5000"}, True) == Alignment(5000, 60_000)
    assert parse_alignment({"eventtimealignment.maxdriftms": "0", "eventtimealignment.idletimeoutms": "10"},
                           True) == Alignment(0, 10)
    for bad, msg in [({"eventtimealignment.maxdriftms": "5s"}, "milliseconds"),
                     ({"eventtimealignment.maxdriftms": "-1"}, ">= 0"),
                     ({"eventtimealignment.idletimeoutms": "10"}, "needs 'eventTimeAlignment.maxDriftMs'")]:
        with pytest.raises(KafkaSourceOptionError, match=msg):
            parse_alignment(bad, True)
    with pytest.raises(KafkaSourceOptionError, match="only valid for streaming"):
        parse_alignment({"eventtimealignment.maxdriftms": "1"}, False)
    opts = parse_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                          "eventTimeAlignment.maxDriftMs": "2000"}, streaming=True)
    assert opts.alignment == Alignment(2000, 60_000)


def test_probe_next_record_or_last_record() -> None:
    assert probe_positions({A: 5, B: 9, C: 0}, {A: 10, B: 9, C: 0}) == {A: 5, B: 8}


def test_slowest_active_partition_sets_the_horizon() -> None:
    al = Alignment(max_drift_ms=1000, idle_timeout_ms=30_000)
    start, ends = {A: 0, B: 0, C: 4}, {A: 100, B: 100, C: 5}
    stamps = {A: NOW - 60_000, B: NOW - 5_000, C: NOW - 1_000}
    assert horizon_ms(start, ends, stamps, NOW, al) == NOW - 60_000 + 1000


def test_idle_partition_holds_nobody_back_but_a_recent_one_does() -> None:
    al = Alignment(max_drift_ms=1000, idle_timeout_ms=30_000)
    start, ends = {A: 100, B: 0}, {A: 100, B: 50}  # A has nothing to read
    assert horizon_ms(start, ends, {A: NOW - 120_000, B: NOW - 50_000}, NOW, al) == NOW - 50_000 + 1000  # A idle
    assert horizon_ms(start, ends, {A: NOW - 10_000, B: NOW - 5_000}, NOW, al) == NOW - 10_000 + 1000  # A recent


def test_unknown_time_of_a_backlog_turns_alignment_off_for_the_batch() -> None:
    al = Alignment(1000)
    assert horizon_ms({A: 0, B: 0}, {A: 10, B: 10}, {A: NOW, B: None}, NOW, al) is None
    assert horizon_ms({A: 10}, {A: 10}, {A: NOW - 10 ** 9}, NOW, al) is None  # only an idle partition


def test_caps_never_go_behind_the_start_and_leave_unbounded_partitions() -> None:
    start, ends = {A: 10, B: 20, C: 0}, {A: 100, B: 200, C: 50}
    assert cap_ends(start, ends, {A: 40, B: 5, C: None}) == {A: 40, B: 20, C: 50}
    assert cap_ends(start, ends, {A: 1000}) == ends
