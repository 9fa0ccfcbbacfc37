"""The fault points: inert unless armed, refused when misspelt, bounded when they wait, spent once marked."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rewind.errors import Refused
from rewind.faults import ENV, POINTS, Fault, FaultInjected, arm, fault_point


def test_an_unarmed_point_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    for point in POINTS:
        fault_point(point, batch=1)
    monkeypatch.setenv(ENV, json.dumps([{"point": "sink.committed", "action": "raise", "batch": 2}]))
    fault_point("sink.committed", batch=1)  # another batch
    fault_point("sink.pre_committed", batch=2)  # another point
    with pytest.raises(FaultInjected, match="sink.committed"):
        fault_point("sink.committed", batch=2)


@pytest.mark.parametrize("value, says", [
    ("not json", "not JSON"),
    ('[{"point": "sink.precommitted", "action": "kill"}]', "no fault point 'sink.precommitted'"),
    ('[{"point": "sink.committed", "action": "explode"}]', "action 'explode'"),
    ('[{"point": "sink.committed", "action": "pause", "seconds": 3600}]', "at most 600"),
    ('[{"point": "sink.committed", "action": "kill", "when": 1}]', "unknown key"),
    ('["sink.committed"]', "must be an object"),
])
def test_a_misspelt_fault_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch, value: str, says: str) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(Refused, match=says):
        fault_point("sink.committed", batch=0)


def test_a_pause_ends_in_an_error_instead_of_hanging(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    marker = tmp_path / "paused"
    monkeypatch.setenv(ENV, arm(Fault("sink.pre_committed", "pause", batch=3, marker=str(marker), seconds=0.2))[ENV])
    started = time.monotonic()
    with pytest.raises(FaultInjected, match="nobody acted"):
        fault_point("sink.pre_committed", batch=3)
    assert time.monotonic() - started < 5
    fired = json.loads(marker.read_text())
    assert fired["point"] == "sink.pre_committed" and fired["batch"] == 3 and fired["pid"] > 0
    fault_point("sink.pre_committed", batch=3)  # the marker exists: spent, the restarted run passes


def test_every_point_is_called_by_production_code() -> None:
    """A point nobody calls would arm a fault that never fires: the test arming it would prove nothing."""
    root = Path(__file__).resolve().parents[1] / "rewind"
    source = "\n".join(p.read_text() for p in root.rglob("*.py") if p.name != "faults.py")
    for point in POINTS:
        assert f'fault_point("{point}"' in source, f"no production code marks {point}"


def test_a_base64_value_arms_the_same_faults_and_survives_a_hop_without_quotes() -> None:
    from rewind.faults import Fault, _parse, arm, encoded

    plain = arm(Fault("sink.pre_committed", "pause", batch=3, marker="/tmp/m.json", seconds=30))["REWIND_FAULTS"]
    shipped = encoded(plain)
    assert '"' not in shipped and encoded(shipped) == shipped
    assert _parse(shipped) == _parse(plain) == [Fault("sink.pre_committed", "pause", batch=3, marker="/tmp/m.json",
                                                      seconds=30)]
