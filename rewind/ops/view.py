"""What the operator page shows for each stream, derived from what the platform already stores.

Sources (nothing new is measured here):
- the status the running stream writes into its control store (``rewind.control.status_store``):
  state, heartbeat, last batch, Kafka lag per partition, the YARN application that ran it, and its history
  (throughput and lag over the last hour); whether a driver holds the stream's lease;
- the supervisor's failure history (the ``failures`` document): last recovery, crash-loop verdict;
- savepoint manifests in S3 (``rewind.checkpoints.savepoints.list_savepoints``);
- the newest proof (``$REWIND_HOME/dq/STREAM/RUN/proof.json``, written by ``rewind.proof.dq.run_proof``);
- the replay lease (``rewind.replay.guard``) and reports (``$REWIND_HOME/replays/STREAM/ID``);
- each table's Asset cursor against the last committed batch (``rewind.assets.drift_read``);
- Airflow DAG runs, fetched by the caller (the UI plugin, through Airflow's REST API with the
  user's token) and passed in as plain dicts.

:func:`build_stream_view` is pure: :class:`Inputs` in, :class:`StreamView` out. The readers at the
bottom (``read_inputs`` and friends) are the I/O edge. No Airflow import here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rewind import paths
from rewind.assets.drift_read import drift_views
from rewind.checkpoints.savepoints import list_savepoints
from rewind.control.driver_lease import driver_alive
from rewind.control.location import control_store
from rewind.control.status import StreamStatus
from rewind.control.status_store import read_stream_history, read_stream_status
from rewind.paths import paths_of
from rewind.replay.guard import current_holder
from rewind.safe_names import check_run_id
from rewind.supervision.failures import read_failures
from rewind.supervision.health import Thresholds, diagnose
from rewind.upgrade.history import read_history as read_upgrades
from rewind.upgrade.views import history_rows

#: States the page knows.
STATES = ("running", "recovering", "failed", "stopped")
CHART_WINDOW_S = 3600.0
REPLAY_SPAN = 1000  # records per partition the pre-filled replay form covers
ACTIVE_RUN_STATES = ("queued", "running")


def dag_ids(stream: str) -> dict[str, str]:
    """The DAGs the factory generates for a stream (and the shared replay DAG), as ``rewind.paths`` names them."""
    return asdict(paths.dag_ids(stream))


# --------------------------------------------------------------------------- inputs / outputs
@dataclass
class Inputs:
    """Everything gathered for one stream (by the readers below and the caller's Airflow look-ups)."""

    stream: str
    topics: list[str]
    status: StreamStatus | None = None
    process_alive: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    failures: dict[str, Any] = field(default_factory=lambda: {"failures": [], "gave_up": None})
    history: list[dict[str, Any]] = field(default_factory=list)
    savepoints: list[dict[str, Any]] = field(default_factory=list)  # Manifest.summary() dicts
    savepoints_error: str | None = None
    proof: dict[str, Any] | None = None  # proof.json of the newest run
    proof_at: float | None = None
    replay_holder: dict[str, Any] | None = None  # the replay lock's holder, None = free
    replay_reports: list[dict[str, Any]] = field(default_factory=list)  # newest first
    dag_runs: list[dict[str, Any]] = field(default_factory=list)  # Airflow DAGRunResponse dicts
    dag_runs_error: str | None = None
    upgrades: list[dict[str, Any]] = field(default_factory=list)  # rewind.upgrade.history records, oldest first
    assets: list[dict[str, Any]] = field(default_factory=list)  # rewind.assets.drift.TableDrift.view() per table
    assets_error: str | None = None


@dataclass
class StreamView:
    name: str
    topics: list[str]
    state: str
    since: float | None
    detail: str
    last_batch: dict[str, Any] | None
    lag: dict[str, Any]
    recovery: dict[str, Any] | None
    savepoints: list[dict[str, Any]]
    dq: dict[str, Any] | None
    replays: list[dict[str, Any]]
    chart: dict[str, Any]
    replay_defaults: dict[str, Any]
    dags: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    spark_ui: str | None = None  # the running driver's Spark UI
    yarn_app_id: str | None = None  # the YARN application that ran the driver (also once it ended: which one)
    yarn_tracking_url: str | None = None  # its tracking UI (the ResourceManager's proxy), None unless http(s)
    upgrades: list[dict[str, Any]] = field(default_factory=list)  # upgrades and rescales, newest first
    assets: list[dict[str, Any]] = field(default_factory=list)  # Asset events against the committed batches

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))


# --------------------------------------------------------------------------- pure derivations
def derive_state(status: StreamStatus | None, alive: bool, failures: dict[str, Any], now: float,
                 thresholds: Thresholds = Thresholds()) -> tuple[str, float | None, str]:
    """(state, since, detail): running / recovering / failed / stopped, from the status snapshot,
    whether its process is alive, and the supervisor's failure history.

    - the supervisor gave up (crash loop) -> failed, since it gave up;
    - healthy (``rewind.supervision.health.diagnose``) -> running since the driver started, or recovering while a
      driver relaunched after a recorded failure has not committed a batch yet;
    - unhealthy with a failure recorded after the driver started -> recovering (the supervisor acts);
    - stopped cleanly, nothing recorded since -> stopped; no status at all -> stopped (never ran);
    - otherwise (process gone, query failed, hung, stalled) -> failed since the last heartbeat.
    """
    gave_up = failures.get("gave_up")
    if gave_up:
        return "failed", gave_up.get("at"), f"the supervisor gave up: {gave_up.get('reason', '')}"[:500]
    health = diagnose(status, now, alive, thresholds)
    last_failure = (failures.get("failures") or [None])[-1]
    if status is None:
        return "stopped", None, health.detail
    if health.healthy or health.cause == "lag_over_threshold":
        if last_failure and status.started_at >= last_failure["at"] and (
                status.last_batch_at is None or status.last_batch_at < status.started_at):
            return "recovering", last_failure["at"], (f"relaunched after {last_failure['cause']}; waiting for "
                                                      "its first batch")
        if status.state == "starting":
            return "recovering" if last_failure else "running", status.started_at, "starting"
        return "running", status.started_at, health.detail
    if last_failure and last_failure["at"] >= status.heartbeat - 1.0:
        return "recovering", last_failure["at"], f"{last_failure['cause']}: the supervisor is recovering it"
    if health.cause == "stopped":
        return "stopped", status.heartbeat, health.detail
    return "failed", status.heartbeat, f"{health.cause}: {health.detail}"[:500]


def last_batch(status: StreamStatus | None, now: float) -> dict[str, Any] | None:
    if status is None or status.last_batch_id is None:
        return None
    at = status.last_batch_at
    return {"batch_id": status.last_batch_id, "at": at, "age_s": None if at is None else round(now - at, 1),
            "end_offsets": status.end_offsets}


def lag_view(status: StreamStatus | None) -> dict[str, Any]:
    """Records behind per partition (``topic/partition`` -> n, sorted), the total, when Kafka was asked."""
    if status is None:
        return {"partitions": {}, "total": None, "at": None}
    def key(k: str) -> tuple[str, int]:
        topic, _, part = k.rpartition("/")
        return (topic, int(part) if part.isdigit() else 0)
    parts = {k: status.lag[k] for k in sorted(status.lag, key=key)}
    return {"partitions": parts, "total": status.total_lag, "at": status.lag_at}


def recovery_view(failures: dict[str, Any], status: StreamStatus | None,
                  history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last failure the supervisor recorded and how long the recovery took (where known).

    ``relaunched_after_s``: failure -> the next driver's start (status ``started_at``);
    ``first_batch_after_s``: failure -> the first sample of a new batch by that driver (history file;
    None when the history does not reach back to it).
    """
    items = failures.get("failures") or []
    if not items:
        return None
    f = items[-1]
    at = float(f["at"])
    out: dict[str, Any] = {"cause": f.get("cause"), "at": at, "batch_id": f.get("batch_id"),
                           "detail": (f.get("detail") or "")[:400], "failures_recorded": len(items),
                           "relaunched_after_s": None, "first_batch_after_s": None, "recovered": False}
    if status is not None and status.started_at >= at:
        out["relaunched_after_s"] = round(status.started_at - at, 1)
        first = next((s for s in history if s["t"] > status.started_at and s.get("batch") is not None
                      and s.get("batch") != f.get("batch_id") and s.get("pid", status.pid) == status.pid), None)
        if first is not None:
            out["first_batch_after_s"] = round(first["t"] - at, 1)
        out["recovered"] = out["first_batch_after_s"] is not None
    return out


def savepoint_rows(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Manifest summaries, newest first, with what the page shows."""
    rows = [{"savepoint_id": s["savepoint_id"], "created_at": s.get("created_at"), "batch_id": s.get("batch_id"),
             "bytes": s.get("total_bytes"), "files": s.get("file_count"), "mode": s.get("mode"),
             "offsets": s.get("offsets") or {}} for s in summaries]
    return sorted(rows, key=lambda r: str(r["created_at"] or ""), reverse=True)


def dq_view(proof: dict[str, Any] | None, at: float | None) -> dict[str, Any] | None:
    """The newest proof's verdict, counts, failed expectations and where its Data Docs are
    (``nothing_to_prove``: the reason a proof before the stream's first committed batch passed with nothing)."""
    if not proof:
        return None
    counts = proof.get("counts") or {}
    keep = ("kafka_records", "events", "dead_letters", "missing", "duplicate_event_rows", "windows_checked",
            "windows_mismatched", "windows_pending", "aggregates_checked", "aggregates_mismatch")
    return {"run_id": proof.get("run_id"), "ok": bool(proof.get("ok")), "at": at,
            "nothing_to_prove": proof.get("nothing_to_prove"),
            "expectations": proof.get("expectations"),
            "failed": [f.get("name") for f in proof.get("failures") or []],
            "counts": {k: counts[k] for k in keep if k in counts} or dict(list(counts.items())[:8]),
            "data_docs_s3": (proof.get("s3") or {}).get("data_docs"), "range": proof.get("range")}


def replay_views(stream: str, holder: dict[str, Any] | None, dag_runs: list[dict[str, Any]],
                 reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replays of the stream now: the lock's holder (a job writing), and queued/running replay DAG runs
    for this stream; each running report is listed too."""
    out: list[dict[str, Any]] = []
    if holder:
        out.append({"source": "lock", "replay_id": holder.get("replay_id"), "mode": holder.get("mode"),
                    "since": holder.get("started_at"), "pid": holder.get("pid"), "state": "running",
                    "range": holder.get("range")})
    for run in dag_runs:
        conf = run.get("conf") or {}
        if run.get("dag_id") == "rewind_replay" and conf.get("stream") == stream \
                and run.get("state") in ACTIVE_RUN_STATES:
            out.append({"source": "dag_run", "dag_run_id": run.get("dag_run_id"), "state": run.get("state"),
                        "since": run.get("start_date") or run.get("queued_at") or run.get("run_after"),
                        "from": conf.get("from"), "to": conf.get("to"), "mode": conf.get("mode"),
                        "dry_run": conf.get("dry_run"), "replay_id": conf.get("replay_id") or None})
    known = {r.get("replay_id") for r in out}
    for rep in reports:
        if rep.get("status") == "running" and rep.get("replay_id") not in known:
            out.append({"source": "report", "replay_id": rep.get("replay_id"), "mode": rep.get("mode"),
                        "since": rep.get("started_at"), "state": "running (report)"})
    return out


def dag_summary(stream: str, dag_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per DAG of the stream: its id and newest run (state, run id, when)."""
    out: dict[str, Any] = {}
    for role, dag_id in dag_ids(stream).items():
        runs = [r for r in dag_runs if r.get("dag_id") == dag_id
                and (role not in ("replay", "upgrade") or (r.get("conf") or {}).get("stream") == stream)]
        runs.sort(key=lambda r: str(r.get("run_after") or r.get("queued_at") or ""), reverse=True)
        newest = runs[0] if runs else None
        out[role] = {"dag_id": dag_id, "last_run": None if newest is None else {
            "dag_run_id": newest.get("dag_run_id"), "state": newest.get("state"),
            "run_after": newest.get("run_after"), "end_date": newest.get("end_date")}}
    return out


def chart_series(samples: list[dict[str, Any]], now: float, window_s: float = CHART_WINDOW_S,
                 idle_s: float = 30.0) -> dict[str, Any]:
    """Throughput (records/s) and total lag over the window, from the status history samples.

    Throughput is the growth of the driver's record count between two samples of the same driver
    (pid) where it grew; ``idle_s`` without growth is a 0 point. A new driver counts from 0, so a
    sample of another pid (or a smaller count) starts over: no rate is invented across a restart.
    """
    pts = sorted((s for s in samples if now - window_s <= s["t"] <= now + 60), key=lambda s: s["t"])
    throughput: list[list[float]] = []
    lag: list[list[float]] = []
    prev: dict[str, Any] | None = None
    for s in pts:
        if s.get("lag") is not None:
            lag.append([round(s["t"], 1), int(s["lag"])])
        rows = s.get("rows")
        if rows is None:
            continue
        if prev is None or s.get("pid") != prev.get("pid") or rows < prev["rows"] or s["t"] <= prev["t"]:
            prev = s
        elif rows > prev["rows"]:
            throughput.append([round(s["t"], 1), round((rows - prev["rows"]) / (s["t"] - prev["t"]), 1)])
            prev = s
        elif s["t"] - prev["t"] >= idle_s:
            throughput.append([round(s["t"], 1), 0.0])
            prev = s
    return {"window_s": window_s, "from": now - window_s, "to": now, "throughput": throughput, "lag": lag}


def default_replay_range(end_offsets: dict[str, dict[str, Any]], span: int = REPLAY_SPAN) -> dict[str, str]:
    """A recent, already-processed range for the replay form: the last ``span`` offsets of each partition
    below the stream's committed end (Spark-style JSON), else the whole topic."""
    if not end_offsets:
        return {"from": "earliest", "to": "latest"}
    to = {t: {p: int(o) for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))}
          for t, parts in sorted(end_offsets.items())}
    frm = {t: {p: max(0, o - span) for p, o in parts.items()} for t, parts in to.items()}
    return {"from": json.dumps(frm, separators=(",", ":")), "to": json.dumps(to, separators=(",", ":"))}


def yarn_app(status: StreamStatus | None) -> tuple[str | None, str | None]:
    """(application id, tracking URL) of a driver YARN ran (``status.cluster``: ``rewind.control.cluster_identity``)."""
    c = status.cluster if status is not None and (status.cluster or {}).get("manager") == "yarn" else {}
    url = c.get("tracking_url") or ""
    return c.get("app_id") or None, url if url.startswith(("http://", "https://")) else None


def build_stream_view(inp: Inputs, now: float) -> StreamView:
    state, since, detail = derive_state(inp.status, inp.process_alive, inp.failures, now, inp.thresholds)
    problems = [p for p in (inp.savepoints_error and f"savepoints: {inp.savepoints_error}",
                            inp.dag_runs_error and f"Airflow DAG runs: {inp.dag_runs_error}",
                            inp.assets_error and f"Asset events: {inp.assets_error}") if p]
    rng = default_replay_range(inp.status.end_offsets if inp.status else {})
    yarn_id, yarn_url = yarn_app(inp.status)
    return StreamView(
        name=inp.stream, topics=list(inp.topics), state=state, since=since, detail=detail,
        last_batch=last_batch(inp.status, now), lag=lag_view(inp.status),
        recovery=recovery_view(inp.failures, inp.status, inp.history),
        savepoints=savepoint_rows(inp.savepoints), dq=dq_view(inp.proof, inp.proof_at),
        replays=replay_views(inp.stream, inp.replay_holder, inp.dag_runs, inp.replay_reports),
        chart=chart_series(inp.history, now),
        replay_defaults={"stream": inp.stream, **rng, "mode": "into-sink", "dry_run": True},
        dags=dag_summary(inp.stream, inp.dag_runs), problems=problems,
        spark_ui=inp.status.spark_ui if inp.status is not None and inp.process_alive else None,
        yarn_app_id=yarn_id, yarn_tracking_url=yarn_url,
        upgrades=history_rows(inp.upgrades, newest_first=True)[:10], assets=inp.assets)


# --------------------------------------------------------------------------- I/O edge
def rewind_home_of(spec: Any) -> Path:
    """Where proofs and replay reports of the stream live (``rewind.paths``)."""
    return paths_of(spec).home


def newest_proof(spec: Any) -> tuple[dict[str, Any] | None, float | None, Path | None]:
    """(proof.json, its mtime, its run dir) of the newest proof run of the stream, or Nones."""
    root = rewind_home_of(spec) / "dq" / spec.name
    best: tuple[float, Path] | None = None
    try:
        for run_dir in root.iterdir():
            proof = run_dir / "proof.json"
            try:
                mtime = proof.stat().st_mtime
            except OSError:
                continue
            if best is None or mtime > best[0]:
                best = (mtime, run_dir)
    except OSError:
        return None, None, None
    if best is None:
        return None, None, None
    try:
        return json.loads((best[1] / "proof.json").read_text()), best[0], best[1]
    except (OSError, ValueError):
        return None, None, None


def proof_dir(spec: Any, run_id: str) -> Path:
    """The local run dir of one proof (run id checked: it becomes a path)."""
    return rewind_home_of(spec) / "dq" / spec.name / check_run_id(run_id)


def replay_reports(spec: Any, limit: int = 5) -> list[dict[str, Any]]:
    """The newest local replay reports of the stream (``$REWIND_HOME/replays/STREAM/ID/report.json``)."""
    root = rewind_home_of(spec) / "replays" / spec.name
    found: list[tuple[float, Path]] = []
    try:
        for d in root.iterdir():
            rep = d / "report.json"
            try:
                found.append((rep.stat().st_mtime, rep))
            except OSError:
                continue
    except OSError:
        return []
    out = []
    for _, rep in sorted(found, reverse=True)[:limit]:
        try:
            out.append(json.loads(rep.read_text()))
        except (OSError, ValueError):
            continue
    return out


def read_inputs(spec: Any, store: Any = None, now: float | None = None) -> Inputs:
    """Read the stream's files (status, history, failures, proof, replay lock and reports) and, given an
    ``rewind.storage.S3Storage``, its savepoint manifests. DAG runs are the caller's (Airflow) part."""
    now = time.time() if now is None else now
    control = control_store(spec)
    status = read_stream_status(spec, control)
    proof, proof_at, _ = newest_proof(spec)
    inp = Inputs(stream=spec.name, topics=list(spec.topics), status=status,
                 process_alive=bool(status) and driver_alive(spec)[0],
                 thresholds=Thresholds(**spec.supervision.thresholds()), failures=read_failures(spec),
                 history=read_stream_history(spec, since=now - CHART_WINDOW_S, store=control), proof=proof,
                 proof_at=proof_at, replay_reports=replay_reports(spec), upgrades=read_upgrades(spec))
    try:
        inp.replay_holder = current_holder(control, spec.name)
    except OSError:
        inp.replay_holder = None
    inp.assets, inp.assets_error = drift_views(spec, now)
    if store is not None:
        try:
            inp.savepoints = [m.summary() for m in list_savepoints(store, spec.name).complete]
        except Exception as exc:  # noqa: BLE001 - S3 down: the page says so and shows the rest
            inp.savepoints_error = f"{type(exc).__name__}: {exc}"[:300]
    else:
        inp.savepoints_error = "no S3 configured"
    return inp
