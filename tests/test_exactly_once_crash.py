"""Exactly-once under real crashes, end to end: the stream process SIGKILLed while events flow.

Once per sink kind that writes from the executors, each with the kills that matter for it (the SQL
sink staged on PostgreSQL, with a state rescale between its kills: ``tests/test_repartition.py``; the
Delta sink here): the first run dies between batch 2's pre-commit and its commit (fault point
``sink.pre_committed``: the driver SIGKILLs its own process group there), the next run's Python
workers are SIGKILLed while they write a batch (Spark retries their tasks), then its driver at a
random moment; a last run catches up and stops, and ``verify_stream`` checks every Kafka record
against the sink and its dead letters, and every window total against a recomputation (``tests/harness/crash.py``).

Where the other crash claims are proven, each once:
- every sink (SQL on SQLite and PostgreSQL, staged or not; Kafka; Delta) killed at each commit point
  and finished by a fresh process: ``tests/test_sink_commit_points.py`` (no Spark);
- the transactional Kafka sink written from the driver, killed between pre-commit and commit, with an
  executor JVM killed, checkpoint on ``s3a://``: ``tests/test_spark_cluster.py``;
- SQLite from the driver with kills during a batch, during a commit and at random, many times:
  ``tests/test_chaos.py``; Rewind's Python source (``rewind_kafka``) SIGKILLed mid-run:
  ``tests/test_late_routing.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.crash import run_crash_scenario

from rewind.embedded.services import PlatformInfo

pytestmark = pytest.mark.slow


def test_exactly_once_under_sigkill_delta_sink(tmp_path: Path, platform: PlatformInfo, new_topic) -> None:
    """The Delta sink written from the executors: killed after batch 2's tables were merged and before its
    ledger row, then its Python workers and its driver; the proof reads the Delta tables."""
    from deltalake import DeltaTable

    summary = run_crash_scenario(tmp_path, platform, new_topic(3, "crashd"), f"delta://{tmp_path}/lake",
                                 "crash_delta", precommit_kill_batch=2, write_from="executors", kill_workers=True)
    assert "killed_between_pre_commit_and_commit" in summary["kills"][0]
    history = DeltaTable(f"{tmp_path}/lake/crash_delta_events").history()
    assert all(h.get("operation") == "MERGE" for h in history if h.get("operation") not in ("CREATE TABLE",)), \
        "every write of the events table was a MERGE"
