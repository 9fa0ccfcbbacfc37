"""Asset drift (``rewind.assets.drift``): committed batches a table's watcher has not announced, judged with
no service; and ``rewind supervisor status`` showing it from a real control-store directory and a SQLite
sink's ledger (no Spark, no Airflow)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from rewind.assets.drift import (
    TableDrift,
    commit_time,
    drift_alert,
    last_committed,
    needs_ledger,
    oldest_unannounced_at,
    table_drift,
)
from rewind.assets.ranges import Cursor, LedgerBatch
from tests.harness.registry_templates import demo_stream, write_registry

NOW = 10_000.0
INTERVAL = 60.0  # the alert's limit is two: 120 s


def test_no_cursor_is_no_watcher_and_never_an_alert() -> None:
    d = table_drift("w", None, last_batch=500, committed_at=NOW - 9999, interval_s=INTERVAL, now=NOW)
    assert (d.watcher, d.behind, d.alert) == (False, 0, False)
    assert d.line() == "w: no watcher"
    assert drift_alert("s", [d]) is None


def test_caught_up() -> None:
    d = table_drift("w", Cursor(through_batch=7, seq=3, emitted_at=NOW - 5000), 7, NOW - 4000, INTERVAL, NOW)
    assert (d.watcher, d.behind, d.age_s, d.alert) == (True, 0, None, False)
    assert d.line().startswith("w: caught up, announced through batch 7 (seq 3")
    assert drift_alert("s", [d]) is None


def test_behind_by_less_than_two_intervals_is_shown_not_alerted() -> None:
    cursor = Cursor(through_batch=7, seq=3, emitted_at=NOW - 100)
    d = table_drift("w", cursor, 9, NOW - 10, INTERVAL, NOW, oldest_at=NOW - 90)
    assert (d.behind, d.age_s, d.exact, d.alert) == (2, 90.0, True, False)
    assert "w: 2 batch(es) behind, within 120s: oldest unannounced committed 90s ago" in d.line()
    assert drift_alert("s", [d]) is None


def test_behind_by_more_than_two_intervals_is_an_alert() -> None:
    cursor = Cursor(through_batch=7, seq=3, emitted_at=NOW - 400)
    d = table_drift("w", cursor, 12, NOW - 1, INTERVAL, NOW, oldest_at=NOW - 121)
    assert (d.behind, d.age_s, d.alert) == (5, 121.0, True)
    assert "DRIFT (over 120s)" in d.line() and "last committed 12" in d.line()
    text = drift_alert("demo", [table_drift("dead", None, 12, NOW, INTERVAL, NOW), d])
    assert text is not None and text.splitlines()[0] == ("Asset events of w behind: the oldest committed batch not "
                                                         "announced is 121s old (limit 120s, two assets.interval)")
    assert "w: 5 batch(es) behind" in text and "watcher of demo" in text
    assert "dead" not in text  # a table without a watcher is never part of the alert


def test_one_batch_behind_is_judged_from_the_status_alone() -> None:
    cursor = Cursor(through_batch=7, emitted_at=NOW - 1000)
    assert not needs_ledger(cursor, 8, NOW - 200, INTERVAL, NOW)  # the last batch is the oldest unannounced
    d = table_drift("w", cursor, 8, NOW - 200, INTERVAL, NOW)
    assert (d.exact, d.age_s, d.alert) == (True, 200.0, True)
    assert not table_drift("w", cursor, 8, NOW - 30, INTERVAL, NOW).alert  # idle for long, then one new batch


def test_many_behind_needs_the_ledger_only_when_the_status_cannot_decide() -> None:
    recent = Cursor(through_batch=7, emitted_at=NOW - 60)
    assert not needs_ledger(recent, 20, NOW - 1, INTERVAL, NOW)  # claimed 60 s ago: nothing older than that
    d = table_drift("w", recent, 20, NOW - 1, INTERVAL, NOW)
    assert (d.exact, d.alert) == (False, False) and ">= 1s" in d.line()
    stale = Cursor(through_batch=7, emitted_at=NOW - 1000)
    assert needs_ledger(stale, 20, NOW - 1, INTERVAL, NOW)  # busy stream, old claim: only the ledger knows
    assert not needs_ledger(stale, 20, NOW - 500, INTERVAL, NOW)  # even the newest batch is too old: alert
    assert table_drift("w", stale, 20, NOW - 500, INTERVAL, NOW).alert


def test_a_claim_in_flight_is_shown_and_does_not_count_as_announced() -> None:
    event = {"event_id": "s/w/4", "batches": [8, 9], "seq": 4}
    cursor = Cursor(through_batch=7, seq=3, emitted_at=NOW - 90, pending={"event": event, "claimed_at": NOW - 3})
    d = table_drift("w", cursor, 9, NOW - 4, INTERVAL, NOW, oldest_at=NOW - 20)
    assert (d.pending, d.pending_at, d.behind, d.alert) == ("s/w/4 (batches 8-9)", NOW - 3, 2, False)
    assert "claim in flight s/w/4 (batches 8-9)" in d.line()
    stuck = Cursor(7, None, NOW - 900, 3, (), {"event": event, "claimed_at": NOW - 800})  # never read back
    assert table_drift("w", stuck, 9, NOW - 790, INTERVAL, NOW, oldest_at=NOW - 805).alert
    replay = Cursor(9, None, NOW - 10, 4, (), {"event": {"event_id": "s/w/5", "replay_id": "r1"}, "claimed_at": NOW})
    assert table_drift("w", replay, 9, NOW, INTERVAL, NOW).pending == "s/w/5 (replay r1)"


def test_the_ledger_gives_the_last_batch_and_the_oldest_unannounced_commit_time() -> None:
    ledger = [LedgerBatch(i, {}, None, None, None, f"2026-01-01 00:00:{i:02d}+00:00") for i in (3, 1, 2)]
    assert last_committed(ledger) == (3, commit_time("2026-01-01T00:00:03+00:00"))
    assert oldest_unannounced_at(ledger, 1) == commit_time("2026-01-01 00:00:02+00:00")
    assert oldest_unannounced_at(ledger, 3) is None and last_committed([]) == (None, None)
    assert commit_time("2026-01-01 00:00:00") == commit_time("2026-01-01T00:00:00Z") == 1767225600.0
    assert commit_time("not a time") is None


def test_the_view_is_plain_json_with_its_line() -> None:
    v = TableDrift("w", False).view()
    assert json.loads(json.dumps(v)) == v and v["line"] == "w: no watcher"


# --------------------------------------------------------------------------- the command line, for real
def _busy_stream(tmp_path: Path) -> tuple[Path, Any, Any, float]:
    """Stream ``dr`` with batches 0..9 in its ledger, 0..8 ten minutes back, 9 just committed and in its status:
    a busy stream, whose status cannot tell how old the oldest unannounced batch is, only its ledger can."""
    from dataclasses import asdict

    from rewind.control.location import control_store
    from rewind.control.status import StreamStatus
    from rewind.registry import load_registry

    registry = write_registry(tmp_path / "streams.yaml", demo_stream("dr", "dr-topic", tmp_path))
    spec = load_registry(registry).get("dr")
    store = control_store(spec)
    now = time.time()
    _ledger(spec.sink.url, "dr_", "dr", {**{i: now - 600 + i * 10 for i in range(9)}, 9: now - 1})
    store.write("status", asdict(StreamStatus("dr", "running", last_batch_id=9, last_batch_at=now - 1)))
    return registry, spec, store, now


def _ledger(url: str, prefix: str, stream: str, committed: dict[int, float]) -> None:
    """The SQL sink's ledger as the sink writes it (``rewind.sink.dialects.ledger_table``)."""
    from rewind.sink.dialects import ledger_table

    engine = sa.create_engine(url)
    table = ledger_table(sa.MetaData(), prefix)
    table.create(engine)
    with engine.begin() as conn:
        for batch_id, at in committed.items():
            conn.execute(table.insert(), {"stream": stream, "batch_id": batch_id, "rows_json": "{}",
                                          "source_offsets": None, "epoch": None,
                                          "committed_at": datetime.fromtimestamp(at, UTC).replace(tzinfo=None)})
    engine.dispose()


def _status(tmp_path: Path, registry: Path, args: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "rewind"), "supervisor", "status", "dr",
                           "--registry", str(registry), *args.split()], capture_output=True, text=True, timeout=120)


def test_supervisor_status_shows_the_drift_from_the_ledger_and_the_cursor(tmp_path: Path) -> None:
    from rewind.assets.cursor import write_cursor
    from rewind.control.location import control_store
    from rewind.registry import load_registry

    registry = write_registry(tmp_path / "streams.yaml", demo_stream("dr", "dr-topic", tmp_path))
    spec = load_registry(registry).get("dr")
    now = time.time()
    _ledger(spec.sink.url, "dr_", "dr", {i: now - 600 + i * 10 for i in range(10)})  # 0..9, the last 510 s ago
    before = _status(tmp_path, registry).stdout
    assert "  Asset events: no watcher (no table has an Asset cursor)" in before, before  # no DAG on its tables
    write_cursor(control_store(spec), "window_results", Cursor(4, None, now - 600, 2), None)

    shown = _status(tmp_path, registry)
    lines = shown.stdout.splitlines()
    drift = [ln for ln in lines if "window_results:" in ln]
    assert drift, shown.stdout + shown.stderr
    assert "window_results: 5 batch(es) behind, DRIFT (over 120s): oldest unannounced committed 5" in drift[0]
    assert "announced through batch 4 (seq 2" in drift[0] and "last committed 9" in drift[0]
    assert any(ln.strip() == "events: no watcher" for ln in lines), shown.stdout  # a table with no cursor

    as_json = json.loads(_status(tmp_path, registry, "--json").stdout)
    tables = {d["table"]: d for d in as_json["assets"]}
    assert tables["window_results"]["behind"] == 5 and tables["window_results"]["alert"] is True
    assert abs(tables["window_results"]["age_s"] - 550) < 30  # batch 5 committed 550 s ago
    assert tables["events"]["watcher"] is False

    write_cursor(control_store(spec), "window_results", Cursor(9, None, now, 3),
                 control_store(spec).read("assets.window_results").version)  # type: ignore[union-attr]
    caught_up = [ln for ln in _status(tmp_path, registry).stdout.splitlines() if "window_results:" in ln]
    assert caught_up and "caught up, announced through batch 9" in caught_up[0], caught_up


# --------------------------------------------------------------------------- the alert, as the watch raises it
def test_the_watch_raises_asset_drift_once_per_alert_every_and_the_alert_names_it(tmp_path: Path) -> None:
    """The supervisor's watch (``StreamHealthTrigger.drift``) reads the status and the ledger, the diagnose
    task records the alert (``reconcile.alert``), and ``rewind.alerts`` turns the failed task into an
    ``asset_drift`` alert; a table with no cursor, or one caught up, raises nothing."""
    from types import SimpleNamespace

    from rewind.alerts import TaskOutcome, alert_for
    from rewind.assets.cursor import write_cursor
    from rewind.supervision.failures import read_failures
    from rewind.supervision.health import Health, Verdict
    from rewind.supervision.reconcile import alert
    from rewind_airflow.triggers.health import DRIFT_EVERY_S, StreamHealthTrigger

    registry, spec, store, now = _busy_stream(tmp_path)
    watch = StreamHealthTrigger("dr", str(registry))

    def obs(at: float, alerted: float | None = None) -> SimpleNamespace:
        return SimpleNamespace(at=at, last_alert_at={} if alerted is None else {"asset_drift": alerted})

    assert watch.drift(spec, obs(now), 600.0) is None  # no cursor: no watcher, nothing to say
    write_cursor(store, "window_results", Cursor(9, None, now - 600, 3), None)
    assert watch.drift(spec, obs(now + DRIFT_EVERY_S), 600.0) is None  # caught up
    found = store.read("assets.window_results")
    assert found is not None
    write_cursor(store, "window_results", Cursor(2, None, now - 600, 1), found.version)
    assert watch.drift(spec, obs(now + DRIFT_EVERY_S + 1), 600.0) is None  # looked 1 s ago: not yet again
    text = watch.drift(spec, obs(now + 2 * DRIFT_EVERY_S), 600.0)
    assert text is not None and "window_results: 7 batch(es) behind, DRIFT" in text, text
    assert "oldest unannounced committed 63" in text, text  # batch 3 (ledger: 570 s before now), exactly
    assert watch.drift(spec, obs(now + 3 * DRIFT_EVERY_S, alerted=now), 600.0) is None  # raised within alert_every

    started = time.time() - 1
    alert(spec, Verdict(Health(False, "asset_drift", text), "alert"), time.time())  # what diagnose does with it
    outcome = TaskOutcome("dr", "supervisor", "diagnose", "failed", "ALERT dr", started, read_failures(spec))
    sent = alert_for(outcome, ["asset_drift"], time.time(), dag_id="rewind_dr_supervisor")
    assert sent is not None and sent.event == "asset_drift", sent
    assert sent.subject().startswith("[rewind] dr: asset drift: Asset events of window_results behind"), sent.subject()
    assert alert_for(outcome, ["lag"], time.time()) is None  # not subscribed: not sent, and never a lag alert


# --------------------------------------------------------------------------- the Rewind page
def test_the_page_shows_each_watched_table_and_reads_the_ledger_only_when_the_status_cannot_decide(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    import rewind.assets.drift_read as drift_read
    from rewind.assets.cursor import write_cursor
    from rewind.ops.view import build_stream_view, read_inputs

    registry, spec, store, now = _busy_stream(tmp_path)

    def page() -> dict[str, dict[str, Any]]:
        view = build_stream_view(read_inputs(spec, now=now), now).to_json()
        assert not [p for p in view["problems"] if p.startswith("Asset events")], view["problems"]
        return {a["table"]: a for a in view["assets"]}

    real = drift_read.read_ledger
    monkeypatch.setattr(drift_read, "read_ledger", lambda *a, **k: pytest.fail("the ledger was read"))
    assert not any(a["watcher"] for a in page().values())  # no cursor: no watcher, one read per table, no ledger
    write_cursor(store, "window_results", Cursor(8, None, now - 30, 4), None)
    shown = page()["window_results"]  # one batch behind, committed a second ago: the status decides
    assert (shown["behind"], shown["alert"], shown["exact"]) == (1, False, True), shown

    monkeypatch.setattr(drift_read, "read_ledger", real)
    write_cursor(store, "events", Cursor(2, None, now - 600, 1), None)  # stuck: claimed 10 min ago, 7 behind
    tables = page()
    assert (tables["events"]["behind"], tables["events"]["alert"]) == (7, True), tables["events"]
    assert abs(tables["events"]["age_s"] - 570) < 1 and tables["events"]["exact"]  # batch 3, from the ledger
    assert tables["dead_letter"]["watcher"] is False and tables["window_results"]["alert"] is False
