"""rewind.safe_names: every user-supplied name that becomes a path or key is checked the same way."""

from __future__ import annotations

import pytest

from rewind.checkpoints.manifest import validate_savepoint_id
from rewind.checkpoints.savepoint_errors import InvalidSavepointId
from rewind.replay.guard import check_replay_id as guard_replay_id
from rewind.replay.problems import ReplayRefused
from rewind.safe_names import (
    UnknownName,
    UnsafeName,
    check_relpath,
    check_replay_id,
    check_run_id,
    check_savepoint_id,
    check_stream,
    run_dir_name,
)

HOSTILE = ["", "..", "../x", "a/../b", "a/b", "/etc/passwd", "a\\b", "..\\x", "a\x00b", "x\n", "a\tb",
           "%2e%2e", "%2e%2e%2fx", "x" * 5000, " a", "a b"]


@pytest.mark.parametrize("bad", HOSTILE + ["Demo", "1demo", "demo-x", "é"])
def test_stream_names_refused(bad: str) -> None:
    with pytest.raises(UnsafeName) as info:
        check_stream(bad, ["demo"])
    assert info.value.kind == "stream" and str(info.value)


def test_stream_must_be_known() -> None:
    assert check_stream("demo", ["demo", "other"]) == "demo"
    assert check_stream("nosuch") == "nosuch"  # without a registry only the form is checked
    with pytest.raises(UnknownName, match="known streams: demo, other"):
        check_stream("nosuch", ["other", "demo"])


@pytest.mark.parametrize("bad", HOSTILE + [".hidden", "-x", "x" * 201, "é", 7, None])
def test_savepoint_ids_refused(bad: object) -> None:
    with pytest.raises(UnsafeName):
        check_savepoint_id(bad)


@pytest.mark.parametrize("good", ["20261122T120000Z-b7-abcd", "a", "A.b_c-1", "9x"])
def test_savepoint_ids_accepted(good: str) -> None:
    assert check_savepoint_id(good) == good == validate_savepoint_id(good)


def test_savepoint_module_uses_the_same_rule() -> None:
    # the old regex accepted a trailing newline ("$" matches before it); the shared check does not
    for bad in ("a\n", "a/b", "..", "x" * 201):
        with pytest.raises(InvalidSavepointId, match="invalid savepoint id"):
            validate_savepoint_id(bad)


@pytest.mark.parametrize("bad", HOSTILE + ["Fix", "_x", "x" * 64, "a.b"])
def test_replay_ids_refused(bad: str) -> None:
    with pytest.raises(UnsafeName):
        check_replay_id(bad)
    with pytest.raises(ReplayRefused, match="replay id"):
        guard_replay_id(bad)


def test_replay_ids_accepted() -> None:
    for good in ("fix-2026-11-22", "20261122t030000z-1a2b", "a", "x" * 63):
        assert check_replay_id(good) == good == guard_replay_id(good)


def test_run_ids() -> None:
    airflow_run = "manual__2026-11-23T12:00:00.123456+00:00"
    assert check_run_id(run_dir_name(airflow_run)) == "manual__2026-11-23T12_00_00.123456_00_00"
    assert check_run_id("20261123T120000Z-1a2b3c") and check_run_id("replay-fix-1")
    for bad in HOSTILE + [airflow_run, "_x"]:
        with pytest.raises(UnsafeName):
            check_run_id(bad)


def test_relpaths() -> None:
    assert check_relpath("index.html") == "index.html"
    assert check_relpath("validations/demo.exactly_once.events/x/20261123T1-ab.html")
    for bad in ["", "/index.html", "../x", "a/../b", "a//b", "a/./b", "a\\b", "a\x00", ".hidden", "x" * 501,
                "a/%2e%2e/b"]:
        with pytest.raises(UnsafeName):
            check_relpath(bad)


def test_messages_say_what_to_change() -> None:
    with pytest.raises(UnsafeName, match=r"contains '\.\.': remove it"):
        check_savepoint_id("a..b")
    with pytest.raises(UnsafeName, match="at most 200"):
        check_savepoint_id("x" * 300)
    with pytest.raises(UnsafeName, match="'/'"):
        check_replay_id("a/b")
