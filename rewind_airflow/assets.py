"""A stream's output tables as Airflow Assets a DAG can be scheduled on.

``stream_asset("demo", "window_results")`` is an ``Asset`` named ``rewind.demo.window_results`` whose URI
names the sink and table (``rewind.assets.uris``), watched by ``CommittedRangeTrigger``: a DAG with
``schedule=[stream_asset(...)]`` runs on each committed range, reading it from
``triggering_asset_events`` (``committed_ranges`` below). Parse time does no I/O beyond the registry file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset, AssetWatcher

from rewind_airflow.triggers.committed_range import API_CONN_ID, CommittedRangeTrigger


def stream_asset(stream: str, table: str, registry: str | None = None, poll_s: float = 5.0,
                 api_conn_id: str = API_CONN_ID) -> Asset:
    """The Asset of ``stream``'s ``table``, with the watcher that announces its committed ranges."""
    from rewind.assets.uris import asset_name, asset_uri
    from rewind.registry import load_registry

    spec = load_registry(registry).get(stream)
    trigger = CommittedRangeTrigger(stream, table, registry, poll_s, api_conn_id)
    return Asset(name=asset_name(stream, table), uri=asset_uri(spec, table), group="rewind",
                 watchers=[AssetWatcher(name=f"rewind_{stream}_{table}", trigger=trigger)])


def committed_ranges(events: Iterable[Any]) -> list[dict[str, Any]]:
    """The Rewind payloads of a run's triggering Asset events (``context["triggering_asset_events"][asset]``),
    oldest first; events not from a Rewind watcher are left out."""
    out = []
    for event in events:
        extra: Mapping[str, Any] = getattr(event, "extra", None) or {}
        payload = extra.get("payload") if isinstance(extra, Mapping) else None
        if isinstance(payload, Mapping) and payload.get("rewind") == 1:
            out.append(dict(payload))
    return sorted(out, key=lambda p: int(p.get("seq", 0)))
