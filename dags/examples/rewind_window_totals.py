"""Example: a downstream DAG scheduled on a Rewind stream's table, once per committed range.

Airflow runs it on each Asset event of ``rewind.<stream>.window_results`` (Rewind's watcher announces each
committed range once, ``docs/assets.md``). Each run reads the ranges from its triggering events and sums
the windows those batches closed: the per-range totals a daily rollup or a dbt model would build on. Runs
may overlap (no ``max_active_runs=1``), so that each event starts a run of its own rather than waiting for
the one before and being consumed with the next.
The stream is ``$REWIND_EXAMPLE_STREAM`` (default ``demo``); without it in the registry there is no DAG.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from airflow.sdk import DAG, task

STREAM = os.environ.get("REWIND_EXAMPLE_STREAM", "demo")
TABLE = "window_results"


def _registered() -> bool:
    try:
        from rewind.registry import load_registry

        return STREAM in load_registry().streams
    except Exception:  # noqa: BLE001 - no registry here: no example
        return False


if _registered():
    from rewind_airflow.assets import committed_ranges, stream_asset

    windows = stream_asset(STREAM, TABLE)

    with DAG(dag_id=f"rewind_{STREAM}_window_totals", schedule=[windows], start_date=datetime(2026, 1, 1, tzinfo=UTC),
             catchup=False, is_paused_upon_creation=False, tags=["rewind", "example", STREAM],
             doc_md=__doc__):

        @task
        def sum_ranges(**context: Any) -> list[dict[str, Any]]:
            from rewind.assets.consume import range_rows

            out = []
            for payload in committed_ranges(context["triggering_asset_events"][windows]):
                rows = range_rows(STREAM, TABLE, payload)
                amount = sum((Decimal(repr(float(v))) for v in rows["amount_sum"].dropna()), Decimal(0))
                out.append({"event_id": payload["event_id"], "kind": payload["kind"],
                            "batches": payload.get("batches"), "replay_id": payload.get("replay_id"),
                            "windows": len(rows), "event_count": int(rows["event_count"].sum()),
                            "amount_sum": str(amount.quantize(Decimal("0.1")))})
                print(f"{payload['event_id']}: {out[-1]}")
            return out

        sum_ranges()
