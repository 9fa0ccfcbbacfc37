"""`rewind supervisor status|reset STREAM`: what the supervisor sees, and clearing a crash-loop verdict.

``status`` prints the same health verdict the supervisor's trigger computes (from the status
file and the process), the lag per partition, each table's Asset events against the committed batches
(drift, ``rewind.assets.drift``), the YARN application that ran the driver (its tracking UI,
and what the ResourceManager says of it) and the failure history, so the person paged at
3 a.m. sees in one place why a stream is not running. ``reset`` clears the history after the
cause is fixed; the next supervisor run then relaunches (exit 0), and no data was skipped.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from rewind.cli.common import command

if TYPE_CHECKING:
    from rewind.supervision.health import Verdict
    from rewind.supervision.observe import Observation


def add_parser(subparsers: Any) -> None:
    s = command(subparsers, "supervisor", "the supervisor's verdict and failure history; clear a crash loop",
                "status: the health verdict and what the supervisor does about it (with the registry's "
                "thresholds), lag, failures and alerts. reset: forget the failures, alerts and a give-up verdict "
                "(after fixing the cause).", codes={1: "failed, or (status) the stream is not healthy"})
    s.add_argument("action", choices=["status", "reset"])
    s.add_argument("stream")
    s.add_argument("--registry")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_supervisor)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else "-"


def supervisor_view(spec: Any) -> dict[str, Any]:
    """What the supervisor sees and would do, with the registry's thresholds (the trigger's view)."""
    from rewind.supervision.health import evaluate, thresholds_of  # lazy: start-up of the CLI
    from rewind.supervision.observe import observe  # lazy: start-up of the CLI

    obs = observe(spec)
    return {**observation_view(obs, evaluate(obs, thresholds_of(spec))), **asset_drift(spec)}


def asset_drift(spec: Any) -> dict[str, Any]:
    """Each table's Asset events against the sink's ledger (``rewind.assets.drift``): ``assets`` (a list of
    ``TableDrift.view()``), ``assets_error`` when it cannot be read; the rest of the view stands either way."""
    from rewind.assets.drift_read import read_drift  # lazy: start-up of the CLI

    try:
        return {"assets": [d.view() for d in read_drift(spec, ledger=True)], "assets_error": None}
    except Exception as exc:  # noqa: BLE001 - a sink or store away must not hide the supervisor's verdict
        return {"assets": [], "assets_error": f"{type(exc).__name__}: {exc}"[:300]}


def observation_view(obs: Observation, verdict: Verdict) -> dict[str, Any]:
    """What an observation shows and the evaluator's verdict on it (pure); ``yarn_verdict``: the ResourceManager's."""
    from dataclasses import asdict

    from rewind.ops.view import yarn_app  # lazy: start-up of the CLI

    health, st = verdict.health, obs.status
    app_id, tracking_url = yarn_app(st)
    return {"stream": obs.stream, "healthy": health.healthy, "cause": health.cause, "detail": health.detail,
            "action": verdict.action, "reason": verdict.reason,
            "state": st.state if st else None, "pid": st.pid if st else None,
            "last_batch_id": st.last_batch_id if st else None, "last_batch_at": st.last_batch_at if st else None,
            "lag": st.lag if st else {}, "total_lag": st.total_lag if st else 0,
            "yarn_app_id": app_id, "yarn_tracking_url": tracking_url,
            "yarn_verdict": asdict(obs.cluster) if obs.cluster is not None else None,
            "failures": list(obs.failures[-10:]), "gave_up": obs.gave_up,
            "alerts": {cause: at for cause, at in obs.last_alert_at.items()}}


def format_view(v: dict[str, Any]) -> str:
    from rewind.supervision.causes import headline  # lazy: start-up of the CLI

    lines = [f"{v['stream']}: {'healthy' if v['healthy'] else 'UNHEALTHY (' + str(v['cause']) + ')'} - {v['detail']}",
             f"  supervisor: {v['action']} ({v['reason']})",
             f"  state {v['state']}, pid {v['pid']}, last batch {v['last_batch_id']} at {_when(v['last_batch_at'])}, "
             f"lag {v['total_lag']} {v['lag'] or ''}"]
    if v.get("yarn_app_id"):
        lines.append(f"  YARN {v['yarn_app_id']}, tracking UI {v.get('yarn_tracking_url') or '-'}")
    if v.get("yarn_verdict"):
        lines.append(f"  ResourceManager: {v['yarn_verdict']['detail']}")
    tables = v.get("assets") or []
    if v.get("assets_error"):
        lines.append(f"  Asset events: cannot be read: {v['assets_error']}")
    elif tables and not any(d["watcher"] for d in tables):
        lines.append("  Asset events: no watcher (no table has an Asset cursor)")
    elif tables:
        drift = any(d["alert"] for d in tables)
        lines.append(f"  Asset events{' (DRIFT: committed batches unannounced past two intervals)' if drift else ''}:")
        lines += [f"    {d['line']}" for d in tables]
    if v["gave_up"]:
        lines.append(f"  GAVE UP at {_when(v['gave_up']['at'])}: {v['gave_up']['reason']}")
        lines.append(f"  after fixing the cause: rewind supervisor reset {v['stream']}")
    if v["failures"]:
        lines.append(f"  last {len(v['failures'])} failure(s):")
        lines += [f"    {_when(f['at'])} {f['cause']} after batch {f['batch_id']}: {headline(f['detail'], 200)}"
                  for f in v["failures"]]
    return "\n".join(lines)


def cmd_supervisor(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.supervision.failures import reset  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    if args.action == "reset":
        before = reset(spec)
        print(f"{spec.name}: cleared {len(before['failures'])} failure(s), {len(before['alerts'])} alert(s)"
              + (" and the give-up verdict" if before.get("gave_up") else "")
              + f"; the next supervisor run relaunches it (Airflow: trigger rewind_{spec.name}_supervisor)")
        return 0
    view = supervisor_view(spec)
    print(json.dumps(view, indent=1, default=str) if args.json else format_view(view))
    return 0 if view["healthy"] else 1
