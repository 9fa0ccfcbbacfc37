"""A stream started mid-topic is proven from its start (``rewind.proof.origin``): the pure rules, and the origin
kept once in the stream's control store from its checkpoint's initial offsets. End to end (a stream started at
explicit offsets, proven, then damaged above its start): tests/test_smallest_stream.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewind.control.location import control_store
from rewind.driver.initial_offsets import initial_offsets_bytes, match_partitions
from rewind.kafka.types import TP
from rewind.proof.origin import (
    ORIGIN,
    floor,
    gives_a_start,
    origin_text,
    parse_initial_offsets,
    stream_origin,
    unknown_origin_note,
)
from rewind.registry import load_registry


@pytest.mark.parametrize(("options", "expected"), [
    ({}, False),
    ({"startingOffsets": "earliest"}, False),
    ({"STARTINGOFFSETS": " Earliest "}, False),
    ({"startingOffsets": "latest"}, True),
    ({"startingOffsets": '{"t": {"0": 5}}'}, True),
    ({"startingTimestamp": "1700000000000"}, True),
    ({"startingOffsets": "earliest", "startingOffsetsByTimestamp": '{"t": {"0": 1}}'}, True),  # the timestamp wins
    ({"maxOffsetsPerTrigger": "10"}, False),
])
def test_only_an_entry_that_gives_a_start_other_than_earliest_has_an_origin(options: dict[str, str],
                                                                            expected: bool) -> None:
    assert gives_a_start(options) is expected


def test_sparks_initial_offsets_file_is_read_with_or_without_its_zero_byte() -> None:
    body = json.dumps({"pay": {"0": 17, "2": 4}, "other": {"1": 0}})
    want = {("pay", 0): 17, ("pay", 2): 4, ("other", 1): 0}
    assert parse_initial_offsets(b"\x00v1\n" + body.encode()) == want
    assert parse_initial_offsets(b"v1\n" + body.encode()) == want
    with pytest.raises(ValueError):
        parse_initial_offsets(b"v2\n" + body.encode())
    with pytest.raises(ValueError):
        parse_initial_offsets(b"v1\nnot json")


def test_a_kept_start_is_written_as_sparks_connector_writes_its_own() -> None:
    """rewind.driver.initial_offsets writes the Python source's start in the connector's file format: its reader
    (KafkaSourceInitialOffsetWriter) skips the first byte unread and then wants ``v1``, so a checkpoint moved to
    the connector reads the same start."""
    data = initial_offsets_bytes({("pay", 2): 4, ("pay", 0): 17, ("other", 1): 0})
    assert data[:1] == b"\x00" and data[1:].startswith(b"v1\n")
    assert json.loads(data[4:]) == {"other": {"1": 0}, "pay": {"0": 17, "2": 4}}
    assert parse_initial_offsets(data) == {("pay", 0): 17, ("pay", 2): 4, ("other", 1): 0}


def test_a_kept_start_meets_the_partitions_there_are_now_as_the_connectors_planning_does() -> None:
    kept = {("t", 0): 10, ("t", 1): 12}
    assert match_partitions(kept, [TP("t", 0), TP("t", 1)]) == (kept, [], [])
    # a partition added after the start was kept: read from its earliest (-2), not refused for going unnamed
    assert match_partitions(kept, [TP("t", 1), TP("t", 2), TP("t", 0)]) == (
        {("t", 0): 10, ("t", 1): 12, ("t", 2): -2}, [("t", 2)], [])
    # a topic deleted and made again with fewer partitions: the one gone is named, the rest kept
    assert match_partitions({**kept, ("u", 0): 3}, [TP("t", 0), TP("t", 1)]) == (kept, [], [("u", 0)])


def test_a_proof_starts_at_the_later_of_retention_and_the_origin() -> None:
    earliest = {TP("pay", 0): 3, TP("pay", 1): 50, TP("pay", 2): 0}
    origin = {("pay", 0): 20, ("pay", 1): 10}  # partition 1: retention passed the origin; 2: added later
    assert floor(earliest, origin) == {TP("pay", 0): 20, TP("pay", 1): 50, TP("pay", 2): 0}
    assert floor(earliest, {}) == earliest
    assert floor({("pay", 0): 3}, origin) == {("pay", 0): 20}  # tuple keys too
    assert origin_text(origin) == "pay[0] 20, pay[1] 10"


def _spec(tmp_path: Path, options: str) -> object:
    registry = tmp_path / "streams.yaml"
    registry.write_text(f"streams:\n  mid:\n    topics: [pay]\n    transform: minis.t:Tiny\n"
                        f"    sink: {{url: \"sqlite:///{tmp_path}/mid.db\"}}\n"
                        f"    checkpoint: {tmp_path}/checkpoints/mid\n    status_dir: {tmp_path}/status\n{options}")
    return load_registry(registry).get("mid")


def _initial(tmp_path: Path, offsets: dict[str, dict[str, int]]) -> None:
    folder = tmp_path / "checkpoints" / "mid" / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "0").write_bytes(b"\x00v1\n" + json.dumps(offsets).encode())


def test_the_origin_is_kept_once_and_a_later_checkpoint_does_not_move_it(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "    source:\n      options: {startingOffsets: latest}\n")
    assert stream_origin(spec) == {}  # not started yet: nothing kept
    assert control_store(spec).read(ORIGIN) is None
    _initial(tmp_path, {"pay": {"0": 40, "1": 41}})
    assert stream_origin(spec) == {("pay", 0): 40, ("pay", 1): 41}
    kept = control_store(spec).read(ORIGIN)
    assert kept is not None and kept.doc["offsets"] == {"pay": {"0": 40, "1": 41}}
    _initial(tmp_path, {"pay": {"0": 900, "1": 901}})  # an upgrade's new checkpoint starts at its own offsets
    assert stream_origin(spec) == {("pay", 0): 40, ("pay", 1): 41}


def test_a_stream_from_earliest_has_no_origin_and_keeps_none(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "")
    _initial(tmp_path, {"pay": {"0": 40}})
    assert stream_origin(spec) == {}
    assert control_store(spec).read(ORIGIN) is None


def test_an_unreadable_initial_offsets_file_proves_from_retention_and_keeps_nothing(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "    source:\n      options: {startingOffsets: latest}\n")
    folder = tmp_path / "checkpoints" / "mid" / "sources" / "0"
    folder.mkdir(parents=True)
    (folder / "0").write_bytes(b"something else")
    assert stream_origin(spec) == {}
    assert control_store(spec).read(ORIGIN) is None


def test_a_python_source_stream_without_a_kept_start_is_told_why_records_before_it_are_judged(
        tmp_path: Path) -> None:
    python = _spec(tmp_path, "    source:\n      format: rewind_kafka\n      options: {startingOffsets: latest}\n")
    note = unknown_origin_note(python, stream_origin(python))
    assert note and "has no record of where it started" in note and "limitations.md" in note
    assert unknown_origin_note(python, {("pay", 0): 4}) is None  # an origin known: nothing to say
    assert unknown_origin_note(_spec(tmp_path, "    source:\n      format: rewind_kafka\n"), {}) is None  # earliest
    connector = _spec(tmp_path, "    source:\n      options: {startingOffsets: latest}\n")
    assert unknown_origin_note(connector, {}) is None  # before its first batch: nothing wrong yet
