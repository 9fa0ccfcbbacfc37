"""One real Airflow 3 (api-server, scheduler, dag-processor, triggerer) for the module, and what is proven in it.

Why one: an Airflow takes 25 s or more to start on 2 cores, and every claim below needs a running
one, not one each. In file order:

1. the stack itself: the login (a generated password in a 0600 file; a wrong one is refused), the
   components' health, a DAG with a task that defers to a trigger (only the triggerer can resume it)
   and a task that reads the connections given as ``AIRFLOW_CONN_*``, an import error reported
   with its cause;
2. the Rewind page and its API: authentication, a viewer's read-only access, refusals of malicious
   names, the admin's actions creating DAG runs, the savepoint DAG's restore path;
3. stopping the stack leaves no process and no open port.

Recovery driven by the supervisor DAG through a real Airflow is proven with the CeleryExecutor, its
launch and recovery on two workers on two hosts (``tests/test_celery_hosts.py``); the LocalExecutor
of ``make up`` runs the same DAG and operators. The page's tests read a status file this module
writes for the stream ``uitest`` (no stream runs for it), read from its registry when the DAGs are
parsed.
"""

from __future__ import annotations

import json
import shutil
import socket
import stat
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from rewind.control.status import StreamStatus, append_history, write_status
from rewind.embedded.services import PlatformInfo
from rewind.paths import status_file
from rewind.registry import load_registry
from rewind.runtime.airflow_client import AirflowApiError, AirflowClient
from tests.harness.registry_templates import demo_stream, write_registry

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
STREAM = "uitest"
SAVEPOINT_DAG = f"rewind_{STREAM}_savepoint"

DAG_ID = "rewind_airflow_probe"

PROBE_DAG = textwrap.dedent('''
    from __future__ import annotations

    import datetime
    import os

    from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
    from airflow.sdk import BaseHook, BaseOperator, dag, task


    class WaitDeferred(BaseOperator):
        """Defers to a 2 s timer: only the triggerer can bring it back, in a new worker process."""

        def execute(self, context):
            self.defer(trigger=TimeDeltaTrigger(datetime.timedelta(seconds=2)), method_name="resume",
                       kwargs={"deferred_in_pid": os.getpid()})

        def resume(self, context, event=None, deferred_in_pid=None):
            return {"deferred_in_pid": deferred_in_pid, "resumed_in_pid": os.getpid(), "event": str(event)}


    @dag(dag_id="%s", schedule=None, start_date=datetime.datetime(2024, 1, 1), catchup=False)
    def probe():
        @task
        def hello(**context):
            return {"conf": dict(context["dag_run"].conf or {}), "marker": os.environ.get("REWIND_TEST_MARKER")}

        waited = WaitDeferred(task_id="wait_deferred")

        @task
        def check(waited, hi):
            from rewind_airflow.hooks.stream import RewindStreamHook

            s3 = BaseHook.get_connection("rewind_s3")
            kafka = BaseHook.get_connection("rewind_kafka")
            spark = RewindStreamHook("probe").get_conn()  # the Spark connection as a stream's launch reads it
            return {"waited": waited, "hello": hi,
                    "s3": {"type": s3.conn_type, "login": s3.login, "endpoint": s3.extra_dejson["endpoint_url"]},
                    "kafka": [kafka.extra_dejson["bootstrap"], kafka.extra_dejson["bootstrap.servers"],
                              f"{kafka.host}:{kafka.port}"],
                    "spark_master": spark.master, "spark_binary": spark.spark_binary}

        check(waited.output, hello())


    probe()
''' % DAG_ID)  # noqa: UP031 (the DAG source is full of braces that .format or an f-string would have to double)

# Airflow only parses files that mention both "airflow" and "dag" (dag_discovery_safe_mode).
BROKEN_DAG = "from airflow.sdk import dag\nimport rewind_module_that_does_not_exist  # cannot be imported\n"


def _processes_of(home: Path) -> list[psutil.Process]:
    """Every live process whose environment points AIRFLOW_HOME at ``home`` (tasks included)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("AIRFLOW_HOME") == str(home) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def stack(airflow_factory: Any, platform: PlatformInfo, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("airflow_stack")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "rewind_streams.py", dags)
    (dags / "probe.py").write_text(PROBE_DAG)
    reg = write_registry(home / "streams.yaml", demo_stream(STREAM, "uitest-events", home))
    spec = load_registry(reg).get(STREAM)
    now = time.time()
    st = StreamStatus(stream=STREAM, state="running", pid=999_999_999, heartbeat=now, started_at=now - 60,
                      last_batch_id=7, last_batch_at=now - 1, end_offsets={"uitest-events": {"0": 40, "1": 41}},
                      lag={"uitest-events/0": 3, "uitest-events/1": 0}, total_lag=3, lag_at=now, input_rows=81)
    write_status(status_file(spec), st)
    append_history(status_file(spec), st, now=now - 5)
    started = time.monotonic()
    af = airflow_factory(env={"REWIND_REGISTRY": str(reg), "REWIND_TEST_MARKER": "m-42"}, dags=dags,
                         schedules=False, extra_users={"viewer": "viewer"})
    started_s = time.monotonic() - started
    admin, viewer = af.client(), af.client(user="viewer")
    admin.wait_dag(SAVEPOINT_DAG, timeout=180)
    admin.wait_dag("rewind_replay", timeout=60)
    http = httpx.Client(base_url=af.url, timeout=30)
    try:
        yield {"af": af, "admin": admin, "viewer": viewer, "http": http, "spec": spec, "registry": reg,
               "dags": dags, "platform": platform, "started_s": started_s}
    finally:
        http.close()
        admin.close()
        viewer.close()
        af.stop()  # an idle Airflow would take CPU for the rest of the run (the last test stops it first)


# --------------------------------------------------------------------------- 1. the stack itself
def test_login_health_a_deferred_task_connections_and_an_import_error(stack: dict[str, Any]) -> None:
    airflow, platform = stack["af"], stack["platform"]
    t0 = time.monotonic()
    # the login: a generated password, in a 0600 file, that the API accepts; a wrong one is refused
    assert airflow.password and airflow.password != "admin" and len(airflow.password) >= 16
    assert stat.S_IMODE(airflow.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(airflow.config_file.stat().st_mode) == 0o600
    with AirflowClient(airflow.url, airflow.username, "wrong-password") as wrong, \
            pytest.raises(AirflowApiError) as bad:
        wrong.list_dags()
    assert bad.value.status == 401 and airflow.url in str(bad.value)
    client = stack["admin"]

    health = client.health()
    assert {health[p]["status"] for p in ("metadatabase", "scheduler", "triggerer", "dag_processor")} == {"healthy"}

    client.wait_dag(DAG_ID, timeout=60)
    assert DAG_ID in [d["dag_id"] for d in client.list_dags()]
    assert client.get_dag(DAG_ID)["is_paused"] is True  # new DAGs start paused

    client.unpause(DAG_ID)
    assert client.get_dag(DAG_ID)["is_paused"] is False
    t1 = time.monotonic()
    run_id = client.trigger_dag(DAG_ID, {"requested_by": "test"})
    state = client.wait_dag_run(DAG_ID, run_id, timeout=120, poll=0.5)
    run_s = time.monotonic() - t1
    tis = {ti["task_id"]: ti["state"] for ti in client.task_instances(DAG_ID, run_id)}
    if state != "success":
        logs = {t: client.task_log(DAG_ID, run_id, t)[-2000:] for t in tis}
        pytest.fail(f"run {run_id} ended {state}; tasks {tis}; logs {json.dumps(logs, indent=1)}")
    assert tis == {"hello": "success", "wait_deferred": "success", "check": "success"}

    result = client.xcom(DAG_ID, run_id, "check")
    waited = result["waited"]
    assert waited["deferred_in_pid"] != waited["resumed_in_pid"], waited  # resumed after the trigger fired
    assert result["hello"] == {"conf": {"requested_by": "test"}, "marker": "m-42"}
    assert result["s3"] == {"type": "aws", "login": platform.s3_access_key, "endpoint": platform.s3_endpoint}
    assert result["kafka"] == [platform.kafka_bootstrap] * 3
    assert result["spark_master"] == "local[2]" and result["spark_binary"] == "spark-submit"
    assert "deferred" in client.task_log(DAG_ID, run_id, "wait_deferred").lower() or waited["event"]

    # a DAG file that cannot be imported shows up on the import-errors endpoint, with its cause
    t2 = time.monotonic()
    broken = stack["dags"] / "broken.py"
    broken.write_text(BROKEN_DAG)
    try:
        err = client.wait_import_error("broken.py", timeout=60)
    finally:
        broken.unlink()
    error_s = time.monotonic() - t2
    assert "rewind_module_that_does_not_exist" in err["stack_trace"]
    assert not [e for e in client.import_errors() if "probe.py" in e["filename"]]
    print(json.dumps({"airflow_start_s": round(stack["started_s"], 1), "db_migrate_s": airflow.timings["db_migrate_s"],
                      "dag_run_s": round(run_s, 1), "import_error_reported_s": round(error_s, 1),
                      "test_s": round(time.monotonic() - t0, 1)}))


# --------------------------------------------------------------------------- 2. the Rewind page and its API
def _bearer(client: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.token()}"}


def _runs(stack: dict[str, Any], dag_id: str) -> list[dict[str, Any]]:
    return stack["admin"].dag_runs(dag_id)


ACTIONS = [("savepoint", {"stream": STREAM}),
           ("restore", {"stream": STREAM, "savepoint_id": "20261123T120000Z-b1-aaaa"}),
           ("replay", {"stream": STREAM, "from": "0", "to": "10", "mode": "into-sink", "dry_run": True})]


def test_the_api_server_answers_while_another_process_holds_the_metadata_write_lock(stack: dict[str, Any]) -> None:
    """The API server's audit log writes on its event loop's thread (``rewind.embedded.airflow_sqlite``): a PATCH
    waiting for a write lock held elsewhere stops every request of that server for as long as it waits. With the
    30 s of the other components, a read sent during a 12-s lock was answered only once the lock went (and CI of
    54bed2e timed out on such a PATCH); with the server's own 5 s it is answered while the lock is still held."""
    import sqlite3
    import threading

    af = stack["af"]
    token = stack["admin"].token()
    holder = sqlite3.connect(af.home / "airflow.db", isolation_level=None, timeout=30)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as a long transaction of another component holds it
    held_at = time.monotonic()
    patched: dict[str, Any] = {}

    def patch() -> None:  # one attempt, no client retry: its audit-log INSERT waits for the lock on the loop
        with httpx.Client(base_url=af.url, timeout=60) as one:
            patched["status"] = one.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": True},
                                          headers={"Authorization": f"Bearer {token}"}).status_code
    try:
        sender = threading.Thread(target=patch, daemon=True)
        sender.start()
        time.sleep(1.0)  # the PATCH is waiting
        with httpx.Client(base_url=af.url, timeout=60) as reader:
            health = reader.get("/api/v2/monitor/health")
        answered_s = time.monotonic() - held_at
        assert health.status_code == 200, health.text[:300]
        assert answered_s < 11.0, f"a read took {answered_s:.1f}s while the write lock was held: the server stalled"
        time.sleep(max(0.0, 12.0 - (time.monotonic() - held_at)))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    sender.join(timeout=60)
    assert patched.get("status") == 500, patched  # refused after its own 5 s; clients retry a 500


def test_unauthenticated_gets_nothing(stack: dict[str, Any]) -> None:
    http = stack["http"]
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
    assert _runs(stack, SAVEPOINT_DAG) == [] and _runs(stack, "rewind_replay") == []


def test_page_and_data_for_a_logged_in_user(stack: dict[str, Any]) -> None:
    http, admin = stack["http"], stack["admin"]
    page = http.get("/rewind/", headers=_bearer(admin))
    assert page.status_code == 200 and 'data-testid="replay-form"' in page.text and "text/html" in page.headers[
        "content-type"]
    # the UI's login cookie works as well (the page runs inside Airflow's UI)
    assert http.get("/rewind/", cookies={"_token": admin.token()}).status_code == 200
    http.cookies.clear()
    data = http.get("/rewind/api/streams", headers=_bearer(stack["viewer"])).json()
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


def test_viewer_may_not_trigger(stack: dict[str, Any]) -> None:
    http = stack["http"]
    for kind, body in ACTIONS:
        r = http.post(f"/rewind/api/actions/{kind}", json=body, headers=_bearer(stack["viewer"]))
        assert r.status_code == 403, (kind, r.status_code, r.text)
    assert _runs(stack, SAVEPOINT_DAG) == [] and _runs(stack, "rewind_replay") == []


def test_malicious_names_are_refused_and_nothing_is_triggered(stack: dict[str, Any]) -> None:
    http, h = stack["http"], _bearer(stack["admin"])
    before = len(_runs(stack, SAVEPOINT_DAG)), len(_runs(stack, "rewind_replay"))
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
    assert (len(_runs(stack, SAVEPOINT_DAG)), len(_runs(stack, "rewind_replay"))) == before


def test_admin_actions_create_dag_runs(stack: dict[str, Any]) -> None:
    http, h, admin = stack["http"], _bearer(stack["admin"]), stack["admin"]
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


def test_restore_path_of_the_savepoint_dag_runs_in_airflow(stack: dict[str, Any]) -> None:
    """action=restore takes the restore branch; an unknown savepoint fails it before anything is stopped."""
    admin = stack["admin"]
    admin.unpause(SAVEPOINT_DAG)
    try:
        run_id = admin.trigger_dag(SAVEPOINT_DAG, {"action": "restore", "savepoint_id": "20261123T120000Z-b1-none"})
        assert admin.wait_dag_run(SAVEPOINT_DAG, run_id, timeout=240) == "failed"
    finally:
        admin.pause(SAVEPOINT_DAG)
    states = {t["task_id"]: t["state"] for t in admin.task_instances(SAVEPOINT_DAG, run_id)}
    assert states == {"choose": "success", "restore": "failed", "take_savepoint": "skipped",
                      "apply_retention": "skipped"}, states
    from rewind.runtime.airflow_client import _path

    log = json.dumps(admin._send("GET", _path("dags", SAVEPOINT_DAG, "dagRuns", run_id, "taskInstances", "restore",
                                             "logs", "1"), params={"full_content": "true"}))
    assert "does not exist" in log and "nothing was stopped" in log, log[-3000:]


# --------------------------------------------------------------------------- 3. the stop
def test_stopping_the_stack_leaves_no_process_and_no_port(stack: dict[str, Any]) -> None:
    airflow = stack["af"]
    pids = set(airflow.pids().values())
    for pid in list(pids):  # every descendant alive now must be gone after stop()
        try:
            pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    t0 = time.monotonic()
    airflow.stop()
    print(json.dumps({"airflow_stop_s": round(time.monotonic() - t0, 1)}))
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"
    assert not _processes_of(airflow.home), [p.cmdline() for p in _processes_of(airflow.home)]
    assert not _port_open(airflow.port)
