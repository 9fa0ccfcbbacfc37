"""The Airflow API client's retries, against a scripted HTTP transport (pure client logic, no Airflow).

Why: with SQLite metadata, Airflow's API answers 500 "Database error" while the scheduler holds
the write lock; CI once saw it on ``rewind up``'s POST of a DAG run. The client sends the run id
itself, so the POST can be retried, and a 409 after a 500 means the first attempt created the run.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rewind.runtime.airflow_client import AirflowApiError, AirflowClient

pytestmark = pytest.mark.filterwarnings("ignore")


def client_with(answers: list[tuple[int, dict[str, Any]]], runs: dict[str, dict[str, Any]]) -> tuple[AirflowClient,
                                                                                                   list[str]]:
    """A client whose POSTs of DAG runs get ``answers`` in turn; a POST whose answer is 500 may still
    have created the run (the server's side of the race); GETs read ``runs``."""
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        if request.method == "POST":
            body = json.loads(request.content)
            status, effect = answers.pop(0)
            if effect.get("created"):
                runs[body["dag_run_id"]] = {"dag_run_id": body["dag_run_id"], "conf": body["conf"]}
            if status >= 400:
                return httpx.Response(status, json={"detail": "Database error" if status == 500 else "exists"})
            return httpx.Response(status, json={"dag_run_id": body["dag_run_id"]})
        run_id = request.url.path.rsplit("/", 1)[1]
        return httpx.Response(200, json=runs[run_id]) if run_id in runs else httpx.Response(404, json={})

    client = AirflowClient("http://airflow.test", "admin", "pw")
    client._http = httpx.Client(transport=httpx.MockTransport(handle))
    return client, seen


def test_a_post_that_failed_with_500_is_sent_again_with_the_same_run_id() -> None:
    runs: dict[str, dict[str, Any]] = {}
    client, seen = client_with([(500, {}), (500, {}), (200, {"created": True})], runs)
    run_id = client.trigger_dag("d", {"chain": True})
    assert run_id.startswith("manual__rewind_") and list(runs) == [run_id]
    assert seen.count("POST /api/v2/dags/d/dagRuns") == 3


def test_a_409_after_a_500_that_created_the_run_returns_that_run() -> None:
    runs: dict[str, dict[str, Any]] = {}
    client, _ = client_with([(500, {"created": True}), (409, {})], runs)
    assert client.trigger_dag("d", {"chain": True}, run_id="r-1") == "r-1"


def test_a_409_for_another_run_with_that_id_is_an_error() -> None:
    runs = {"r-1": {"dag_run_id": "r-1", "conf": {"other": 1}}}
    client, _ = client_with([(409, {})], runs)
    with pytest.raises(AirflowApiError) as err:
        client.trigger_dag("d", {"chain": True}, run_id="r-1")
    assert err.value.status == 409


def test_a_post_that_keeps_failing_gives_up_after_six_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _s: None)
    client, seen = client_with([(500, {})] * 6, {})
    with pytest.raises(AirflowApiError, match="HTTP 500"):
        client.trigger_dag("d")
    assert seen.count("POST /api/v2/dags/d/dagRuns") == 6


def scripted(answers: list[Any]) -> tuple[AirflowClient, list[str]]:
    """A client whose requests after the login get ``answers`` in turn: a status, or an exception to raise."""
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        seen.append(request.method)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer, json={"dag_id": "d", "is_paused": False})

    client = AirflowClient("http://airflow.test", "admin", "pw")
    client._http = httpx.Client(transport=httpx.MockTransport(handle), timeout=client._http.timeout)
    return client, seen


def test_an_idempotent_request_that_timed_out_is_sent_again() -> None:
    """CI of 54bed2e: the API server waited for its SQLite write lock as long as the client waited for it,
    and PATCH (unpause) failed the test's setup. The client now waits longer than the server's lock wait,
    and a request it may repeat is sent again after a read timeout."""
    client, seen = scripted([httpx.ReadTimeout("timed out"), 200])
    assert client.unpause("d")["is_paused"] is False
    assert seen == ["PATCH", "PATCH"]
    from rewind.embedded.airflow_sqlite import CONNECT_ARGS
    from rewind.runtime.airflow_client import READ_TIMEOUT_S

    assert READ_TIMEOUT_S > float(str(CONNECT_ARGS["timeout"]))
    assert AirflowClient("http://airflow.test", "a", "b")._http.timeout.read == READ_TIMEOUT_S


def test_a_post_that_timed_out_is_not_sent_twice_and_a_refused_connection_fails_at_once() -> None:
    client, seen = scripted([httpx.ReadTimeout("timed out")])
    with pytest.raises(AirflowApiError, match="did not answer"):
        client._send("POST", "/api/v2/dags/d/dagRuns", json={})
    assert seen == ["POST"]
    client, seen = scripted([httpx.ConnectError("refused")])
    with pytest.raises(AirflowApiError, match="not reachable"):
        client.unpause("d")
    assert seen == ["PATCH"]


def test_a_request_that_keeps_timing_out_gives_up_naming_the_wait() -> None:
    client, seen = scripted([httpx.ReadTimeout("timed out")] * 6)
    with pytest.raises(AirflowApiError, match=r"did not answer \(ReadTimeout after 65s"):
        client.get_dag("d")
    assert seen == ["GET"] * 6
