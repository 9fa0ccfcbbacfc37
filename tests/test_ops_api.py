"""The Rewind page and its API inside a real Airflow: authentication, authorization, refusals, triggers.

One Airflow (admin + a viewer) for the module. Nothing here runs a stream: the page reads a status
file this test writes, and the actions are checked by the DAG runs Airflow records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rewind.paths import status_path
from rewind.registry import load_registry
from rewind.stream.status import StreamStatus, append_history, write_status
from rewind.testing.registry_templates import demo_stream, write_registry

STREAM = "uitest"
SAVEPOINT_DAG = f"rewind_{STREAM}_savepoint"


# --------------------------------------------------------------------------- fast: the restore path
def test_savepoint_dag_has_a_restore_path(tmp_path: Path) -> None:
    # Airflow is imported into this process with conftest's throwaway home. A home of this test's own
    # stayed loaded after the test (CI 2026-11-25: test_airflow_errors' guard, later in the same worker,
    # found Airflow configured from a deleted tmp_path).
    from rewind_airflow.dags.factory import build_dags
    from rewind_airflow.operators.savepoint import restore_task

    reg = write_registry(tmp_path / "streams.yaml", demo_stream(STREAM, "t", tmp_path))
    dag = build_dags(str(reg))[SAVEPOINT_DAG]
    edges = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert edges == {"choose": ["restore", "take_savepoint"], "take_savepoint": ["apply_retention"],
                     "apply_retention": [], "restore": []}
    params = dag.params.dump()
    assert params["action"] == "savepoint" and params["savepoint_id"] == "" and params["relaunch"] is True
    from airflow.sdk.exceptions import AirflowFailException

    class NoStore:  # a bad id is refused before S3, the stream or anything else is touched
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"touched S3 ({name})")

    for bad in ("../x", "a/b", "%2e%2e", "", "x" * 300):
        with pytest.raises(AirflowFailException, match="restore refused.*nothing was stopped"):
            restore_task(STREAM, str(reg), bad, True, store=NoStore())


def test_local_airflow_extra_users_get_generated_private_passwords(tmp_path: Path) -> None:
    import configparser
    import stat

    from rewind.platform.airflow_local import LocalAirflow

    def make(**kw: Any) -> LocalAirflow:
        return LocalAirflow(tmp_path / "home", tmp_path / "dags", tmp_path / "plugins", port=8999, **kw)

    af = make(extra_users={"viewer": "viewer"})
    af.home.mkdir(parents=True)
    af._ensure_password()
    af.write_config()
    pw = json.loads(af.password_file.read_text())
    assert set(pw) == {"admin", "viewer"} and len(pw["viewer"]) >= 20 and pw["viewer"] != pw["admin"]
    assert stat.S_IMODE(af.password_file.stat().st_mode) == 0o600 and af.password_of("viewer") == pw["viewer"]
    cfg = configparser.RawConfigParser()
    cfg.read(af.config_file)
    assert cfg["core"]["simple_auth_manager_users"] == "admin:admin,viewer:viewer"
    again = make(extra_users={"viewer": "viewer"})
    again._ensure_password()
    assert json.loads(again.password_file.read_text()) == pw  # kept across restarts of the home
    plain = make()  # without extra users: exactly what `make up` writes
    plain.write_config()
    cfg.read(plain.config_file)
    assert cfg["core"]["simple_auth_manager_users"] == "admin:admin"
    for bad in ({"viewer": "root"}, {"admin": "viewer"}, {"a:b": "viewer"}):
        with pytest.raises(ValueError, match="extra_users"):
            make(extra_users=bad)


# --------------------------------------------------------------------------- slow: a real Airflow
@pytest.fixture(scope="module")
def env(airflow_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("ops_api")
    reg = write_registry(home / "streams.yaml", demo_stream(STREAM, "uitest-events", home))
    spec = load_registry(reg).get(STREAM)
    now = time.time()
    st = StreamStatus(stream=STREAM, state="running", pid=999_999_999, heartbeat=now, started_at=now - 60,
                      last_batch_id=7, last_batch_at=now - 1, end_offsets={"uitest-events": {"0": 40, "1": 41}},
                      lag={"uitest-events/0": 3, "uitest-events/1": 0}, total_lag=3, lag_at=now, input_rows=81)
    write_status(status_path(spec.status_dir, STREAM), st)
    append_history(status_path(spec.status_dir, STREAM), st, now=now - 5)
    af = airflow_factory(env={"REWIND_REGISTRY": str(reg)}, schedules=False, extra_users={"viewer": "viewer"})
    admin, viewer = af.client(), af.client(user="viewer")
    admin.wait_dag(SAVEPOINT_DAG, timeout=180)
    admin.wait_dag("rewind_replay", timeout=60)
    http = httpx.Client(base_url=af.url, timeout=30)
    try:
        yield {"af": af, "admin": admin, "viewer": viewer, "http": http, "spec": spec}
    finally:
        http.close()
        admin.close()
        viewer.close()
        af.stop()  # an idle Airflow would take CPU for the rest of the run


def _bearer(client: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.token()}"}


def _runs(env: dict[str, Any], dag_id: str) -> list[dict[str, Any]]:
    return env["admin"].dag_runs(dag_id)


ACTIONS = [("savepoint", {"stream": STREAM}),
           ("restore", {"stream": STREAM, "savepoint_id": "20261123T120000Z-b1-aaaa"}),
           ("replay", {"stream": STREAM, "from": "0", "to": "10", "mode": "into-sink", "dry_run": True})]


@pytest.mark.slow
def test_unauthenticated_gets_nothing(env: dict[str, Any]) -> None:
    http = env["http"]
    for headers, cookies in (({}, {}), ({"Authorization": "Bearer not-a-jwt"}, {}), ({}, {"_token": "garbage"})):
        http.cookies.clear()
        for path in ("/rewind/", "/rewind/api/streams", f"/rewind/api/streams/{STREAM}",
                     f"/rewind/api/streams/{STREAM}/dq/x/docs/index.html"):
            r = http.get(path, headers=headers, cookies=cookies)
            assert r.status_code in (401, 403), (path, headers, r.status_code, r.text[:200])
            assert STREAM not in r.text and "stream-row" not in r.text
        for kind, body in ACTIONS:
            r = http.post(f"/rewind/api/actions/{kind}", json=body, headers=headers, cookies=cookies)
            assert r.status_code in (401, 403), (kind, r.status_code, r.text[:200])
    http.cookies.clear()
    assert _runs(env, SAVEPOINT_DAG) == [] and _runs(env, "rewind_replay") == []


@pytest.mark.slow
def test_page_and_data_for_a_logged_in_user(env: dict[str, Any]) -> None:
    http, admin = env["http"], env["admin"]
    page = http.get("/rewind/", headers=_bearer(admin))
    assert page.status_code == 200 and 'data-testid="replay-form"' in page.text and "text/html" in page.headers[
        "content-type"]
    # the UI's login cookie works as well (the page runs inside Airflow's UI)
    assert http.get("/rewind/", cookies={"_token": admin.token()}).status_code == 200
    http.cookies.clear()
    data = http.get("/rewind/api/streams", headers=_bearer(env["viewer"])).json()
    (s,) = [s for s in data["streams"] if s["name"] == STREAM]
    assert data["user"] == "viewer"
    assert s["last_batch"]["batch_id"] == 7 and s["lag"]["partitions"] == {"uitest-events/0": 3, "uitest-events/1": 0}
    assert s["state"] in ("failed", "recovering")  # the pid in the status file is not alive
    assert s["dags"]["savepoint"]["dag_id"] == SAVEPOINT_DAG and "problems" in s
    assert json.loads(s["replay_defaults"]["to"]) == {"uitest-events": {"0": 40, "1": 41}}
    assert s["replay_defaults"]["dry_run"] is True
    plugins = admin._send("GET", "/api/v2/plugins")["plugins"]
    views = [v for p in plugins if p["name"] == "rewind" for v in p["external_views"]]
    assert views and views[0]["name"] == "Rewind" and views[0]["destination"] == "nav"


@pytest.mark.slow
def test_viewer_may_not_trigger(env: dict[str, Any]) -> None:
    http = env["http"]
    for kind, body in ACTIONS:
        r = http.post(f"/rewind/api/actions/{kind}", json=body, headers=_bearer(env["viewer"]))
        assert r.status_code == 403, (kind, r.status_code, r.text)
    assert _runs(env, SAVEPOINT_DAG) == [] and _runs(env, "rewind_replay") == []


@pytest.mark.slow
def test_malicious_names_are_refused_and_nothing_is_triggered(env: dict[str, Any]) -> None:
    http, h = env["http"], _bearer(env["admin"])
    before = len(_runs(env, SAVEPOINT_DAG)), len(_runs(env, "rewind_replay"))
    cases = [("savepoint", {"stream": "nosuch"}, 404, "not in the registry"),
             ("savepoint", {"stream": "../x"}, 400, "stream"),
             ("savepoint", {"stream": "%2e%2e"}, 400, "stream"),
             ("savepoint", {}, 400, "stream"),
             ("restore", {"stream": STREAM, "savepoint_id": "../x"}, 400, "savepoint id"),
             ("restore", {"stream": STREAM, "savepoint_id": "a/b"}, 400, "savepoint id"),
             ("restore", {"stream": STREAM, "savepoint_id": "%2e%2e"}, 400, "savepoint id"),
             ("restore", {"stream": STREAM, "savepoint_id": "a\\b"}, 400, "savepoint id"),
             ("restore", {"stream": STREAM, "savepoint_id": "x" * 5000}, 400, "at most"),
             ("restore", {"stream": STREAM, "savepoint_id": "20261123T120000Z-b1-none"}, 404, "does not exist"),
             ("restore", {"stream": "nosuch", "savepoint_id": "a"}, 404, "not in the registry"),
             ("replay", {"stream": STREAM, "from": "0", "to": "9", "replay_id": "../x"}, 400, "replay id"),
             ("replay", {"stream": STREAM, "from": "0", "to": "9", "mode": "sideways"}, 400, "mode"),
             ("replay", {"stream": STREAM, "from": "0\x00", "to": "9"}, 400, "NUL"),
             ("replay", {"stream": STREAM, "from": "", "to": "9"}, 400, "from is required")]
    for kind, body, code, words in cases:
        r = http.post(f"/rewind/api/actions/{kind}", json=body, headers=h)
        assert r.status_code == code and words in r.json()["detail"], (kind, body, r.status_code, r.text)
    r = http.post("/rewind/api/actions/savepoint", content=f'{{"stream": "{STREAM}"}}',
                  headers={**h, "Content-Type": "text/plain"})  # not JSON: no cross-site form posts
    assert r.status_code == 415
    for path in (f"/rewind/api/streams/{STREAM}/dq/..%2F..%2Fx/docs/index.html",
                 f"/rewind/api/streams/{STREAM}/dq/%2e%2e/docs/index.html",
                 f"/rewind/api/streams/{STREAM}/dq/r1/docs/..%2F..%2Fstreams.yaml",
                 "/rewind/api/streams/nosuch", "/rewind/api/streams/..%2Fx"):
        r = http.get(path, headers=h)
        assert r.status_code in (400, 404), (path, r.status_code, r.text[:200])
    assert (len(_runs(env, SAVEPOINT_DAG)), len(_runs(env, "rewind_replay"))) == before


@pytest.mark.slow
def test_admin_actions_create_dag_runs(env: dict[str, Any]) -> None:
    http, h, admin = env["http"], _bearer(env["admin"]), env["admin"]
    assert admin.get_dag(SAVEPOINT_DAG)["is_paused"] is False  # a registry's savepoint schedule is live
    admin.pause(SAVEPOINT_DAG)  # an operator paused it: the page says the run waits
    r = http.post("/rewind/api/actions/savepoint", json={"stream": STREAM}, headers=h)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dag_id"] == SAVEPOINT_DAG and out["dag_run_id"] in out["message"]
    assert out["paused"] is True and "unpause it" in out["message"]
    run = admin.dag_run(SAVEPOINT_DAG, out["dag_run_id"])
    assert run["conf"] == {"action": "savepoint"}
    # the page sends unpause=true, like the "Unpause on trigger" box of Airflow's trigger form
    r = http.post("/rewind/api/actions/savepoint", json={"stream": STREAM, "unpause": True}, headers=h)
    newest = r.json().get("dag_run_id")
    try:
        assert r.status_code == 200 and r.json()["paused"] is False and "unpaused it" in r.json()["message"], r.text
        assert admin.get_dag(SAVEPOINT_DAG)["is_paused"] is False
    finally:
        admin.unpause(SAVEPOINT_DAG)
    r = http.post("/rewind/api/actions/replay", headers=h,
                  json={"stream": STREAM, "from": "0", "to": "10", "mode": "shadow", "dry_run": True})
    assert r.status_code == 200, r.text
    conf = admin.dag_run("rewind_replay", r.json()["dag_run_id"])["conf"]
    assert conf["stream"] == STREAM and conf["dry_run"] is True and conf["mode"] == "shadow"
    s = http.get(f"/rewind/api/streams/{STREAM}", headers=h).json()
    assert s["dags"]["savepoint"]["last_run"]["dag_run_id"] == newest


@pytest.mark.slow
def test_restore_path_of_the_savepoint_dag_runs_in_airflow(env: dict[str, Any]) -> None:
    """action=restore takes the restore branch; an unknown savepoint fails it before anything is stopped."""
    admin = env["admin"]
    admin.unpause(SAVEPOINT_DAG)
    try:
        run_id = admin.trigger_dag(SAVEPOINT_DAG, {"action": "restore", "savepoint_id": "20261123T120000Z-b1-none"})
        assert admin.wait_dag_run(SAVEPOINT_DAG, run_id, timeout=240) == "failed"
    finally:
        admin.pause(SAVEPOINT_DAG)
    states = {t["task_id"]: t["state"] for t in admin.task_instances(SAVEPOINT_DAG, run_id)}
    assert states == {"choose": "success", "restore": "failed", "take_savepoint": "skipped",
                      "apply_retention": "skipped"}, states
    from rewind.platform.airflow_client import _path

    log = json.dumps(admin._send("GET", _path("dags", SAVEPOINT_DAG, "dagRuns", run_id, "taskInstances", "restore",
                                             "logs", "1"), params={"full_content": "true"}))
    assert "does not exist" in log and "nothing was stopped" in log, log[-3000:]
