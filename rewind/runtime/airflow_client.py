"""The parts of Airflow 3's REST API v2 that Rewind uses: DAGs, runs, task logs, XComs, health.

Plain HTTP (``httpx``, installed with Airflow) with a JWT from ``POST /auth/token`` (the Simple
auth manager's login), renewed once when it expires; so the core library talks to Airflow
without importing it. Any local or remote Airflow 3 will do; ``rewind.embedded.airflow_local``
starts one and hands out clients logged in to it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from rewind.errors import Failed

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
#: Longer than the embedded Airflow's wait for its SQLite write lock (30 s, rewind/embedded/airflow_sqlite.py):
#: a request that queues behind a long transaction gets the server's answer (or its 500, retried), not a client
#: timeout at the same moment (CI of 54bed2e: PATCH of a DAG's pause flag timed out at 30 s).
READ_TIMEOUT_S = 65.0
#: A server that is not listening is refused at once; this bounds one that accepts nothing.
CONNECT_TIMEOUT_S = 10.0


class AirflowError(Failed):
    """Airflow failed to start or answered with an error; the message names the URL or the log."""


class AirflowApiError(AirflowError):
    """The REST API answered with an HTTP error (``status`` is the code, 0 when unreachable)."""

    def __init__(self, message: str, status: int = 0, url: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.url = url


class AirflowClient:
    """The parts of Airflow 3's REST API v2 that Rewind uses, authenticated with a JWT."""

    def __init__(self, url: str, username: str, password: str, timeout: float = READ_TIMEOUT_S) -> None:
        import httpx  # installed with Airflow; imported here to keep module import light

        self.url = url.rstrip("/")
        self.username = username
        self._password = password
        self._token: str | None = None
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "AirflowClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT from ``POST /auth/token`` (the Simple auth manager's login), cached."""
        if self._token is None:
            body = self._send("POST", "/auth/token", json={"username": self.username, "password": self._password},
                              auth=False)
            self._token = body["access_token"]
        return self._token

    def _send(self, method: str, path: str, auth: bool = True, accept: str = "application/json",
              retry: bool = False, **kwargs: Any) -> Any:
        import httpx

        url = self.url + path
        relogged = False
        # Idempotent requests are retried on a 5xx: with its SQLite metadata database, Airflow's API
        # answers 500 "Database error" while the scheduler or the DAG processor holds the write lock.
        # A POST only when the caller made it idempotent (``retry``: a run id of its own).
        tries = 6 if retry or method in ("GET", "PATCH", "PUT", "DELETE") else 1
        attempt = 0
        while True:
            attempt += 1
            headers = {"Accept": accept}
            if auth:
                headers["Authorization"] = f"Bearer {self.token()}"
            try:
                resp = self._http.request(method, url, headers=headers, **kwargs)
            except httpx.TimeoutException as exc:
                if attempt < tries and not isinstance(exc, httpx.ConnectTimeout):
                    continue  # the server is slow, not gone: an idempotent request is sent again
                raise AirflowApiError(f"{method} {url}: Airflow did not answer ({exc.__class__.__name__} after "
                                      f"{self._http.timeout.read:.0f}s; its log names what it was waiting for)",
                                      0, url) from exc
            except httpx.HTTPError as exc:
                raise AirflowApiError(f"{method} {url}: Airflow not reachable ({exc.__class__.__name__}: {exc})",
                                      0, url) from exc
            if resp.status_code == 401 and auth and not relogged:
                self._token = None  # expired: log in again once
                relogged = True
                continue
            if resp.status_code in (500, 502, 503) and attempt < tries:
                time.sleep(0.5 * attempt)
                continue
            if resp.status_code >= 400:
                raise AirflowApiError(f"{method} {url} -> HTTP {resp.status_code}: {resp.text[:1000]}",
                                      resp.status_code, url)
            if not resp.content:
                return None
            if "json" in resp.headers.get("content-type", ""):
                return resp.json()
            return resp.text

    def _paged(self, path: str, key: str, params: dict[str, Any] | None = None, page: int = 100) -> Iterator[dict]:
        offset = 0
        while True:
            body = self._send("GET", path, params={**(params or {}), "limit": page, "offset": offset})
            items = body.get(key, [])
            yield from items
            offset += len(items)
            if not items or offset >= body.get("total_entries", 0):
                return

    # -- API ---------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self._send("GET", "/api/v2/monitor/health", auth=False)

    def list_dags(self) -> list[dict[str, Any]]:
        return list(self._paged("/api/v2/dags", "dags"))

    def get_dag(self, dag_id: str) -> dict[str, Any]:
        return self._send("GET", _path("dags", dag_id))

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self._paged("/api/v2/importErrors", "import_errors"))

    def unpause(self, dag_id: str) -> dict[str, Any]:
        return self._send("PATCH", _path("dags", dag_id), json={"is_paused": False})

    def pause(self, dag_id: str) -> dict[str, Any]:
        return self._send("PATCH", _path("dags", dag_id), json={"is_paused": True})

    def trigger_dag(self, dag_id: str, conf: dict[str, Any] | None = None, run_id: str | None = None,
                    note: str | None = None) -> str:
        """Start a manual run now and return its run id.

        The run id is ours (``run_id``, else a fresh ``manual__rewind_<uuid>``), so a POST that
        answered 500 while Airflow's SQLite was locked can be sent again: a 409 then means the
        first attempt did create the run (seen in ``rewind up``: "Database error" on this POST)."""
        run_id = run_id or f"manual__rewind_{uuid.uuid4().hex[:16]}"
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}, "dag_run_id": run_id}
        if note:
            body["note"] = note
        try:
            return self._send("POST", _path("dags", dag_id, "dagRuns"), json=body, retry=True)["dag_run_id"]
        except AirflowApiError as exc:
            if exc.status != 409:
                raise
            try:
                existing = self.dag_run(dag_id, run_id)
            except AirflowApiError:
                raise exc from None
            if existing.get("conf", {}) != (conf or {}):
                raise
            return str(existing["dag_run_id"])

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._send("GET", _path("dags", dag_id, "dagRuns", run_id))

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of the DAG, oldest first."""
        return list(self._paged(_path("dags", dag_id, "dagRuns"), "dag_runs", params={"order_by": "run_after"}))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self._paged(_path("dags", dag_id, "dagRuns", run_id, "taskInstances"), "task_instances"))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task try's log as text (one line per structured log event)."""
        body = self._send("GET", _path("dags", dag_id, "dagRuns", run_id, "taskInstances", task_id, "logs",
                                       str(try_number)), params={"full_content": "true"})
        content = body.get("content", []) if isinstance(body, dict) else body
        if isinstance(content, str):
            return content
        lines = []
        for event in content:
            if isinstance(event, dict):
                lines.append(" ".join(str(event.get(k, "")) for k in ("timestamp", "level", "event") if event.get(k)))
            else:
                lines.append(str(event))
        return "\n".join(lines)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """A task's XCom value, deserialized (e.g. the dict a TaskFlow task returned)."""
        body = self._send("GET", _path("dags", dag_id, "dagRuns", run_id, "taskInstances", task_id, "xcomEntries",
                                       key), params={"deserialize": "true"})
        return body.get("value")

    def asset_events(self, name_pattern: str, since: float | None = None) -> list[dict[str, Any]]:
        """Asset events of the assets whose name contains ``name_pattern``, stored at or after ``since``
        (epoch seconds), oldest first."""
        params: dict[str, Any] = {"name_pattern": name_pattern, "order_by": "timestamp"}
        if since is not None:
            params["timestamp_gte"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
        return list(self._paged("/api/v2/assets/events", "asset_events", params))

    def wait_import_error(self, filename_part: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the DAG processor reports an import error for a file whose path contains the text."""
        deadline = time.monotonic() + timeout
        while True:
            for err in self.import_errors():
                if filename_part in (err.get("filename") or ""):
                    return err
            if time.monotonic() > deadline:
                raise AirflowError(f"no import error for {filename_part!r} at {self.url} within {timeout:.0f}s")
            time.sleep(0.5)

    def wait_dag(self, dag_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the DAG processor has parsed ``dag_id``; fail early with its import error."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.get_dag(dag_id)
            except AirflowApiError as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                errors = [e for e in self.import_errors()]
                raise AirflowError(f"DAG {dag_id!r} did not appear at {self.url} within {timeout:.0f}s; "
                                   f"import errors: {json.dumps(errors)[:2000]}")
            time.sleep(0.5)

    def wait_dag_run(self, dag_id: str, run_id: str, timeout: float = 300.0, poll: float = 1.0) -> str:
        """Wait for the run to reach ``success`` or ``failed`` and return that state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.dag_run(dag_id, run_id)["state"]
            if state in TERMINAL_RUN_STATES:
                return state
            if time.monotonic() > deadline:
                tis = {ti["task_id"]: ti["state"] for ti in self.task_instances(dag_id, run_id)}
                raise AirflowError(f"DAG run {dag_id}/{run_id} at {self.url} still {state!r} after "
                                   f"{timeout:.0f}s; task states: {tis}")
            time.sleep(poll)


def _path(*segments: str) -> str:
    """``/api/v2/...`` with every segment URL-quoted (run ids hold ``:`` and ``+``)."""
    return "/api/v2/" + "/".join(quote(seg, safe="") for seg in segments)
