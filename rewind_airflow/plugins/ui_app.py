"""The Rewind page inside Airflow: a FastAPI app (mounted at ``/rewind`` by ``rewind_airflow.plugins.rewind``).

- ``GET /rewind/``: one HTML page with vanilla JS (``ui/index.html``) that polls the JSON API.
- ``GET /rewind/api/streams``: every registry stream as ``rewind.ops.view.StreamView`` JSON.
- ``POST /rewind/api/actions/{savepoint,restore,replay}``: trigger the stream's DAGs
  (``rewind_<stream>_savepoint``, the same DAG with ``action=restore``, ``rewind_replay``) through
  Airflow's own REST API with the caller's token, so Airflow creates and authorizes the run as if
  the user had pressed "Trigger" in its UI. Nothing is done here directly.
- ``GET /rewind/api/streams/{stream}/dq/{run_id}/docs/{path}``: the proof's Data Docs site.
- ``GET /rewind/metrics``: every stream as Prometheus metrics (``rewind.ops.metrics``), for a scraper
  with an Airflow login (read access to DAGs) or ``Authorization: Bearer $REWIND_METRICS_TOKEN``.

Access: every route depends on Airflow's ``get_user`` (JWT from ``Authorization: Bearer`` or the
UI's ``_token`` cookie): no token -> 401, a bad one -> 403, and no data either way. Reading needs
read access to DAGs; each action needs ``POST`` on that DAG's runs (``requires_access_dag``),
checked before anything is triggered. User-supplied names go through ``rewind.safe_names``; a
refusal is 400 (malformed) or 404 (unknown) with a message naming what to change.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request

# Airflow imports every .py file of the plugins folder in every task process too, so the API
# server's own modules (security, auth manager) are imported in create_app() only.

log = logging.getLogger(__name__)

PAGE = Path(__file__).resolve().parent / "ui" / "index.html"
COOKIE = "_token"  # airflow.api_fastapi.auth.managers.base_auth_manager.COOKIE_NAME_JWT_TOKEN
MAX_BOUND = 2000  # characters of a replay bound (an offset, a time, or per-partition JSON)
SAVEPOINT_CACHE_S = 10.0


# --------------------------------------------------------------------------- helpers (I/O edge)
def _registry() -> Any:
    from rewind.registry import load_registry

    return load_registry()


_store_lock = threading.Lock()
_store: dict[str, Any] = {}


def savepoint_store() -> Any:
    """S3 for savepoints: the ``rewind_s3`` Airflow connection (as the DAG tasks use it), else the
    environment; None when no bucket is configured."""
    with _store_lock:
        if "store" in _store:
            return _store["store"]
        from rewind.storage import S3Config, S3Storage, resolve_s3_config

        store = None
        try:
            base = resolve_s3_config(require_bucket=False)
            cfg = base
            try:
                from airflow.models.connection import Connection

                conn = Connection.get_connection_from_secrets("rewind_s3")
                extra = conn.extra_dejson or {}
                cfg = S3Config(extra.get("bucket") or base.bucket, extra.get("endpoint_url") or base.endpoint,
                               conn.login or base.access_key, conn.password or base.secret_key,
                               extra.get("region_name") or base.region)
            except Exception as exc:  # noqa: BLE001 - no connection: the environment's settings
                log.debug("no rewind_s3 connection (%s): using the environment", exc)
            store = S3Storage(cfg) if cfg.bucket else None
        except Exception as exc:  # noqa: BLE001
            log.warning("Rewind page: no S3 for savepoints: %s", exc)
        _store["store"] = store
        return store


_sp_cache: dict[str, tuple[float, list[dict[str, Any]], str | None]] = {}


def cached_savepoints(stream: str, store: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Savepoint manifest summaries (newest first), cached a few seconds: every viewer polls."""
    hit = _sp_cache.get(stream)
    if hit and time.monotonic() - hit[0] < SAVEPOINT_CACHE_S:
        return hit[1], hit[2]
    if store is None:
        rows, err = [], "no S3 configured"
    else:
        try:
            from rewind.checkpoints.savepoints import list_savepoints

            rows, err = [m.summary() for m in list_savepoints(store, stream).complete], None
        except Exception as exc:  # noqa: BLE001 - S3 down: say so, show the rest
            rows, err = [], f"{type(exc).__name__}: {exc}"[:300]
    _sp_cache[stream] = (time.monotonic(), rows, err)
    return rows, err


def user_token(request: Request) -> str:
    """The JWT this request was authenticated with (Bearer header first, as ``get_user`` does)."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.cookies.get(COOKIE, "")


def airflow_base(request: Request) -> str:
    """Airflow's own URL: ``[api] base_url``, else this request's scheme and host."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    if base.startswith("http://") or base.startswith("https://"):
        return base
    return f"{request.url.scheme}://{request.url.netloc}{base}"


def airflow_api(request: Request, method: str, path: str, **kwargs: Any) -> Any:
    """Call Airflow's REST API as the requesting user; HTTPException with Airflow's answer on error."""
    import httpx

    url = airflow_base(request) + path
    try:
        resp = httpx.request(method, url, headers={"Authorization": f"Bearer {user_token(request)}",
                                                   "Accept": "application/json"}, timeout=20.0, **kwargs)
    except httpx.HTTPError as exc:
        raise HTTPException(502, f"Airflow's API at {url} did not answer: {exc}") from exc
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise HTTPException(resp.status_code, f"Airflow refused {method} {path}: {detail}")
    return resp.json() if resp.content else None


def recent_dag_runs(request: Request) -> tuple[list[dict[str, Any]], str | None]:
    """The newest runs of every Rewind DAG the user may read (one REST call)."""
    try:
        body = airflow_api(request, "GET", "/api/v2/dags/~/dagRuns",
                           params={"dag_id_prefix_pattern": "rewind_", "order_by": "-run_after", "limit": 200})
        return list(body.get("dag_runs", [])), None
    except HTTPException as exc:
        return [], str(exc.detail)[:300]


def stream_views(request: Request, only: str | None = None) -> list[dict[str, Any]]:
    from rewind.ops.view import build_stream_view, read_inputs

    reg = _registry()
    store = savepoint_store()
    runs, runs_error = recent_dag_runs(request)
    now = time.time()
    out = []
    for name, spec in sorted(reg.streams.items()):
        if only is not None and name != only:
            continue
        inp = read_inputs(spec, store=None, now=now)
        inp.savepoints, inp.savepoints_error = cached_savepoints(name, store)
        inp.dag_runs, inp.dag_runs_error = runs, runs_error
        out.append(build_stream_view(inp, now).to_json())
    return out


def metrics_text() -> bytes:
    """Every registry stream's metrics (no S3, no Airflow look-ups: a scrape must stay cheap)."""
    from rewind.ops.metrics import render
    from rewind.ops.view import read_inputs

    now = time.time()
    reg = _registry()
    return render([read_inputs(spec, store=None, now=now) for _, spec in sorted(reg.streams.items())], now)


async def metrics_access(request: Request) -> None:
    """A scraper's token (``REWIND_METRICS_TOKEN``), else an Airflow user who may read DAG runs (401/403)."""
    import hmac

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag, resolve_user_from_token

    from rewind.settings import metrics_token

    token = metrics_token()
    given = request.headers.get("authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return
    user = await resolve_user_from_token(user_token(request) or None)
    requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN)(request, user)


def _checked_stream(value: Any) -> Any:
    """The registry spec of a user-supplied stream name: 400 malformed, 404 unknown."""
    from rewind.safe_names import UnknownName, UnsafeName, check_stream

    reg = _registry()
    try:
        return reg.get(check_stream(value, reg.streams))
    except UnsafeName as exc:
        raise HTTPException(400, str(exc)) from None
    except UnknownName as exc:
        raise HTTPException(404, str(exc)) from None


def _authorize_trigger(request: Request, user: Any, dag_id: str) -> None:
    """Airflow's own check that ``user`` may create runs of ``dag_id`` (403 otherwise)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    requires_access_dag(method="POST", access_entity=DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)


async def _json_body(request: Request) -> dict[str, Any]:
    if not request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        raise HTTPException(415, "send the action as JSON (Content-Type: application/json)")
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the request body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, required: bool = False, max_len: int = MAX_BOUND) -> str:
    value = body.get(key, "")
    value = "" if value is None else value
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise HTTPException(400, f"{key} must be text")
    value = str(value).strip()
    if required and not value:
        raise HTTPException(400, f"{key} is required")
    if len(value) > max_len:
        raise HTTPException(400, f"{key} is {len(value)} characters long: use at most {max_len}")
    if any(ord(c) < 32 for c in value):
        raise HTTPException(400, f"{key} contains a control character or NUL: remove it")
    return value


def _trigger(request: Request, user: Any, dag_id: str, conf: dict[str, Any], what: str,
             unpause: bool = False) -> dict[str, Any]:
    """Create the run through Airflow's REST API as the user; with ``unpause``, unpause a paused DAG
    too (what the "Unpause on trigger" box of Airflow's own trigger form does), else say it waits."""
    run = airflow_api(request, "POST", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
                      json={"logical_date": None, "conf": conf, "note": f"{what} from the Rewind page"})
    run_id = run.get("dag_run_id")
    message = f"{what}: triggered {dag_id} run {run_id} as {user.get_name()}"
    try:
        paused = bool(airflow_api(request, "GET", f"/api/v2/dags/{quote(dag_id, safe='')}").get("is_paused"))
    except HTTPException:
        paused = None
    if paused and unpause:
        try:
            airflow_api(request, "PATCH", f"/api/v2/dags/{quote(dag_id, safe='')}", json={"is_paused": False})
            paused = False
            message += f"; {dag_id} was paused: unpaused it so that the run starts"
        except HTTPException as exc:
            message += f"; {dag_id} is paused and could not be unpaused ({exc.detail}), so the run waits"
    elif paused:
        message += f"; {dag_id} is paused, so the run waits in the queue: unpause it in Airflow to let it start"
    return {"ok": True, "dag_id": dag_id, "dag_run_id": run_id, "state": run.get("state"), "paused": paused,
            "message": message}


# --------------------------------------------------------------------------- the app
def create_app() -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
    from fastapi import Depends, FastAPI
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

    app = FastAPI(title="Rewind", docs_url=None, redoc_url=None, openapi_url=None)
    read_access = [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))]

    @app.get("/", response_class=HTMLResponse, dependencies=read_access)
    def page():
        return HTMLResponse(PAGE.read_text(), headers={"Cache-Control": "no-store"})

    @app.get("/api/streams", dependencies=read_access)
    def streams(request: Request, user: Any = Depends(get_user)):
        return JSONResponse({"generated_at": time.time(), "user": user.get_name(), "streams": stream_views(request)},
                            headers={"Cache-Control": "no-store"})

    @app.get("/metrics", dependencies=[Depends(metrics_access)])
    def metrics():
        from fastapi.responses import Response
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics_text(), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    @app.get("/api/streams/{stream}", dependencies=read_access)
    def one_stream(stream: str, request: Request):
        spec = _checked_stream(stream)
        return JSONResponse(stream_views(request, spec.name)[0], headers={"Cache-Control": "no-store"})

    @app.get("/api/streams/{stream}/dq/{run_id}/docs/{path:path}", dependencies=read_access)
    def data_docs(stream: str, run_id: str, path: str):
        from rewind.ops.view import proof_dir
        from rewind.safe_names import UnsafeName, check_relpath

        spec = _checked_stream(stream)
        try:
            root = (proof_dir(spec, run_id) / "data_docs").resolve()
            target = (root / check_relpath(path or "index.html")).resolve()
        except UnsafeName as exc:
            raise HTTPException(400, str(exc)) from None
        if root not in target.parents or not target.is_file():
            raise HTTPException(404, f"no Data Docs file {path!r} for proof run {run_id!r} of {spec.name}")
        return FileResponse(target)

    @app.post("/api/actions/savepoint")
    async def take_savepoint(request: Request, user: Any = Depends(get_user)):
        body = await _json_body(request)
        spec = _checked_stream(body.get("stream"))
        dag_id = f"rewind_{spec.name}_savepoint"
        await run_in_threadpool(_authorize_trigger, request, user, dag_id)
        return await run_in_threadpool(_trigger, request, user, dag_id, {"action": "savepoint"},
                                       f"savepoint of {spec.name}", body.get("unpause") is True)

    @app.post("/api/actions/restore")
    async def restore(request: Request, user: Any = Depends(get_user)):
        from rewind.safe_names import UnsafeName, check_savepoint_id

        body = await _json_body(request)
        spec = _checked_stream(body.get("stream"))
        try:
            sid = check_savepoint_id(body.get("savepoint_id"))
        except UnsafeName as exc:
            raise HTTPException(400, str(exc)) from None
        dag_id = f"rewind_{spec.name}_savepoint"
        await run_in_threadpool(_authorize_trigger, request, user, dag_id)
        await run_in_threadpool(_require_savepoint, spec.name, sid)
        return await run_in_threadpool(_trigger, request, user, dag_id,
                                       {"action": "restore", "savepoint_id": sid, "relaunch": True},
                                       f"restore of {spec.name} to savepoint {sid}", body.get("unpause") is True)

    @app.post("/api/actions/replay")
    async def replay(request: Request, user: Any = Depends(get_user)):
        from rewind.replay.guard import MODES
        from rewind.safe_names import UnsafeName, check_replay_id

        body = await _json_body(request)
        spec = _checked_stream(body.get("stream"))
        conf: dict[str, Any] = {"stream": spec.name, "from": _text(body, "from", True),
                                "to": _text(body, "to", True), "topics": _text(body, "topics", max_len=1000),
                                "partitions": _text(body, "partitions", max_len=1000)}
        mode = _text(body, "mode") or "into-sink"
        if mode not in MODES:
            raise HTTPException(400, f"mode {mode[:40]!r} is unknown: use one of {', '.join(MODES)}")
        replay_id = _text(body, "replay_id", max_len=200)
        if replay_id:
            try:
                check_replay_id(replay_id)
            except UnsafeName as exc:
                raise HTTPException(400, str(exc)) from None
        dry_run = body.get("dry_run", True)
        if not isinstance(dry_run, bool):
            raise HTTPException(400, "dry_run must be true or false")
        conf.update(mode=mode, replay_id=replay_id, dry_run=dry_run,
                    allow_beyond_retention=bool(body.get("allow_beyond_retention") is True))
        await run_in_threadpool(_authorize_trigger, request, user, "rewind_replay")
        what = f"{'dry run of a ' if dry_run else ''}replay of {spec.name} [{conf['from'][:60]}, {conf['to'][:60]})"
        return await run_in_threadpool(_trigger, request, user, "rewind_replay", conf, what,
                                       body.get("unpause") is True)

    return app


def _require_savepoint(stream: str, sid: str) -> None:
    """404 unless the savepoint's manifest exists (when S3 is configured: else the DAG task says)."""
    store = savepoint_store()
    if store is None:
        return
    from rewind.checkpoints.manifest import MANIFEST, savepoint_prefix

    try:
        found = store.exists(savepoint_prefix(stream, sid) + MANIFEST)
    except Exception as exc:  # noqa: BLE001
        raise HTTPException(503, f"S3 did not answer ({exc}); nothing was triggered, retry") from None
    if not found:
        known = [r["savepoint_id"] for r in cached_savepoints(stream, store)[0]][:10]
        raise HTTPException(404, f"savepoint {sid!r} of stream {stream!r} does not exist; savepoints: "
                                 f"{', '.join(known) or 'none'}")


__all__ = ["create_app"]
