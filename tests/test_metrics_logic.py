"""The metrics of the Rewind page (fast, no services): Inputs in, Prometheus text out, parsed back.

A real scrape over HTTP while a stream runs, checked against its status file: test_operations.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rewind.control.status import StreamStatus
from rewind.ops.metrics import render
from rewind.ops.view import Inputs


def parsed(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples}


def value(m: dict[Any, float], name: str, **labels: str) -> float:
    return m[(name, tuple(sorted({"stream": "demo", **labels}.items())))]


def test_a_running_stream_with_a_recovery_a_proof_and_a_replay() -> None:
    now = time.time()
    st = StreamStatus(stream="demo", state="running", pid=os.getpid(), heartbeat=now - 1, started_at=now - 300,
                      last_batch_id=41, last_batch_at=now - 3, lag={"demo-events/0": 5, "demo-events/1": 0},
                      total_lag=5, lag_at=now - 2, late_routed_total=7,
                      progress={"input_rows_per_second": 210.5, "processed_rows_per_second": 400.0,
                                "batch_duration_ms": 1500, "watermark": 1_790_000_000.0, "state_rows": None})
    failures = {"failures": [{"at": now - 200, "cause": "process_gone"}, {"at": now - 100, "cause": "process_gone"},
                             {"at": now - 50, "cause": "stalled"}], "alerts": [], "gave_up": None}
    inp = Inputs(stream="demo", topics=["demo-events"], status=st, process_alive=True, failures=failures,
                 proof={"ok": True, "expectations": 23}, proof_at=now - 60,
                 replay_reports=[{"status": "ok"}, {"status": "ok"}, {"status": "proof_failed"}])
    m = parsed(render([inp], now))
    assert value(m, "rewind_stream_up") == 1 and value(m, "rewind_stream_state", state="running") == 1
    assert value(m, "rewind_stream_state", state="failed") == 0
    assert value(m, "rewind_stream_last_batch_id") == 41
    assert 2.9 < value(m, "rewind_stream_last_batch_age_seconds") < 4
    assert value(m, "rewind_stream_input_rows_per_second") == 210.5
    assert value(m, "rewind_stream_processed_rows_per_second") == 400.0
    assert value(m, "rewind_stream_batch_duration_seconds") == 1.5
    assert value(m, "rewind_stream_watermark_seconds") == 1_790_000_000.0
    assert value(m, "rewind_stream_lag_records", topic="demo-events", partition="0") == 5
    assert value(m, "rewind_stream_lag_records_sum") == 5
    assert value(m, "rewind_stream_late_routed_records") == 7
    assert value(m, "rewind_stream_recoveries", cause="process_gone") == 2
    assert value(m, "rewind_stream_recoveries", cause="stalled") == 1
    assert value(m, "rewind_stream_gave_up") == 0
    assert value(m, "rewind_proof_verdict", verdict="pass") == 1 and value(m, "rewind_proof_expectations") == 23
    assert 59 < value(m, "rewind_proof_age_seconds") < 62
    assert value(m, "rewind_replays", status="ok") == 2 and value(m, "rewind_replays", status="proof_failed") == 1
    assert not [k for k in m if k[0] == "rewind_stream_state_rows"]  # not counted: no sample, not a false 0


def test_a_fresh_stream_exports_its_state_and_nothing_invented() -> None:
    now = time.time()
    fresh = Inputs(stream="demo", topics=["t"], proof={"ok": True, "nothing_to_prove": "no batch yet"}, proof_at=now)
    m = parsed(render([fresh], now))
    assert value(m, "rewind_stream_up") == 0 and value(m, "rewind_stream_state", state="stopped") == 1
    assert value(m, "rewind_proof_verdict", verdict="nothing_to_prove") == 1
    assert value(m, "rewind_proof_verdict", verdict="fail") == 0  # a fresh start is no failed proof
    assert not [k for k in m if k[0] in ("rewind_stream_last_batch_id", "rewind_stream_lag_records")]
