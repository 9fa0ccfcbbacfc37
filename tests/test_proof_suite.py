"""Which proof a stream gets (``rewind.proof.suite``) and the late-candidate refusal without ``event_time`` (pure)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from rewind.api.contract import TransformRefused
from rewind.api.late import LATE_CANDIDATE
from rewind.driver.late_routing import mark_behind
from rewind.proof.suite import suite_of


def transform(*tables: str) -> SimpleNamespace:
    return SimpleNamespace(tables=[SimpleNamespace(name=t) for t in tables])


def test_the_demos_suite_only_for_the_demos_tables() -> None:
    default = SimpleNamespace(dq_suite="exactly_once")
    assert suite_of(default, transform("events", "dead_letter", "window_results")) == "exactly_once"
    assert suite_of(default, transform("rows", "dead_letter")) == "contract"  # left at the default: not a crash
    assert suite_of(SimpleNamespace(dq_suite="contract"), transform("events", "dead_letter", "window_results")) \
        == "contract"


def test_late_candidates_without_event_time_are_refused_naming_the_column() -> None:
    frame = pd.DataFrame({"kind": ["row", LATE_CANDIDATE], "id": ["a", "b"]})
    with pytest.raises(TransformRefused, match="event_time"):
        mark_behind(frame, 1000)
    assert mark_behind(pd.DataFrame({"kind": ["row"], "id": ["a"]}), 1000) == 0  # no candidates: nothing needed
