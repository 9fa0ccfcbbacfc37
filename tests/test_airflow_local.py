"""A real local Airflow 3 (api-server, scheduler, dag-processor, triggerer) driven through its REST API.

The DAG written here has a normal task, a task that defers to a trigger (only the triggerer can
resume it) and a task that checks the results and the connections given as ``AIRFLOW_CONN_*``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from rewind.platform.airflow_client import AirflowApiError, AirflowClient
from rewind.platform.airflow_connections import connections_env
from rewind.platform.airflow_local import LocalAirflow
from rewind.platform.services import PlatformInfo

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
            from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

            s3 = BaseHook.get_connection("rewind_s3")
            kafka = BaseHook.get_connection("rewind_kafka")
            spark = SparkSubmitHook(conn_id="spark_default")._resolve_connection()
            return {"waited": waited, "hello": hi,
                    "s3": {"type": s3.conn_type, "login": s3.login, "endpoint": s3.extra_dejson["endpoint_url"]},
                    "kafka": [kafka.extra_dejson["bootstrap"], kafka.extra_dejson["bootstrap.servers"],
                              f"{kafka.host}:{kafka.port}"],
                    "spark_master": spark["master"], "spark_binary": spark["spark_binary"]}

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


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_local_airflow_runs_a_deferrable_dag_through_the_rest_api(tmp_path: Path) -> None:
    home, dags, plugins = tmp_path / "airflow", tmp_path / "dags", tmp_path / "plugins"
    dags.mkdir()
    (dags / "probe.py").write_text(PROBE_DAG)
    fake_platform = PlatformInfo(  # connections only: no service is contacted by this DAG
        workdir=str(tmp_path), s3_endpoint="http://127.0.0.1:9", s3_access_key="probe-key",
        s3_secret_key="probe-secret", s3_region="us-east-1", bucket="rewind", kafka_bootstrap="127.0.0.1:19",
        pids={}, logs={})
    airflow = LocalAirflow(home, dags, plugins, env={"REWIND_TEST_MARKER": "m-42"}, platform=fake_platform)

    t0 = time.monotonic()
    airflow.start()
    started_s = time.monotonic() - t0
    pids = set(airflow.pids().values())
    try:
        # the login: a generated password, in a 0600 file, that the API accepts; a wrong one is refused
        assert airflow.password and airflow.password != "admin" and len(airflow.password) >= 16
        assert stat.S_IMODE(airflow.password_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(airflow.config_file.stat().st_mode) == 0o600
        with AirflowClient(airflow.url, airflow.username, "wrong-password") as wrong, \
                pytest.raises(AirflowApiError) as bad:
            wrong.list_dags()
        assert bad.value.status == 401 and airflow.url in str(bad.value)
        client = airflow.client()

        health = client.health()
        assert {health[p]["status"] for p in ("metadatabase", "scheduler", "triggerer", "dag_processor")} == {"healthy"}

        client.wait_dag(DAG_ID, timeout=60)
        visible_s = time.monotonic() - t0
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
        assert result["s3"] == {"type": "aws", "login": "probe-key", "endpoint": "http://127.0.0.1:9"}
        assert result["kafka"] == ["127.0.0.1:19"] * 3
        assert result["spark_master"] == "local[2]" and result["spark_binary"] == "spark-submit"
        assert "deferred" in client.task_log(DAG_ID, run_id, "wait_deferred").lower() or waited["event"]

        # a DAG file that cannot be imported shows up on the import-errors endpoint, with its cause
        t2 = time.monotonic()
        (dags / "broken.py").write_text(BROKEN_DAG)
        err = client.wait_import_error("broken.py", timeout=60)
        error_s = time.monotonic() - t2
        assert "rewind_module_that_does_not_exist" in err["stack_trace"]
        assert not [e for e in client.import_errors() if "probe.py" in e["filename"]]

        print(json.dumps({"airflow_start_s": round(started_s, 1), "db_migrate_s": airflow.timings["db_migrate_s"],
                          "dag_visible_after_start_s": round(visible_s, 1), "dag_run_s": round(run_s, 1),
                          "import_error_reported_s": round(error_s, 1)}))
    finally:
        for pid in list(pids):  # every descendant alive now must be gone after stop()
            try:
                pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        t3 = time.monotonic()
        airflow.stop()
        stop_s = time.monotonic() - t3
    print(json.dumps({"airflow_stop_s": round(stop_s, 1)}))

    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"
    assert not _processes_of(home), [p.cmdline() for p in _processes_of(home)]
    assert not _port_open(airflow.port)


def test_connections_env_is_json_per_connection() -> None:
    info = PlatformInfo(workdir="/w", s3_endpoint="http://127.0.0.1:1234", s3_access_key="k", s3_secret_key="s",
                        s3_region="eu-west-1", bucket="b", kafka_bootstrap="127.0.0.1:9092", pids={}, logs={})
    env = connections_env(info)
    assert set(env) == {"AIRFLOW_CONN_REWIND_KAFKA", "AIRFLOW_CONN_REWIND_S3", "AIRFLOW_CONN_SPARK_DEFAULT"}
    s3 = json.loads(env["AIRFLOW_CONN_REWIND_S3"])
    assert s3["conn_type"] == "aws" and s3["login"] == "k" and s3["password"] == "s"
    assert s3["extra"]["endpoint_url"] == "http://127.0.0.1:1234" and s3["extra"]["region_name"] == "eu-west-1"
    kafka = json.loads(env["AIRFLOW_CONN_REWIND_KAFKA"])
    assert kafka["extra"]["bootstrap"] == kafka["extra"]["bootstrap.servers"] == "127.0.0.1:9092"
    assert (kafka["host"], kafka["port"]) == ("127.0.0.1", 9092)
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2]"


def test_prepare_keeps_the_password_and_keys_of_a_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarting on the same home keeps the login and the Fernet key; nothing secret is fixed."""
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    first = LocalAirflow(tmp_path / "h", tmp_path / "d", tmp_path / "p", env={})
    first.prepare()
    keys = json.loads((tmp_path / "h" / "secrets.json").read_text())
    second = LocalAirflow(tmp_path / "h", tmp_path / "d", tmp_path / "p", env={})
    second.prepare()
    other = LocalAirflow(tmp_path / "h2", tmp_path / "d", tmp_path / "p", env={})
    other.prepare()
    assert first.password == second.password != other.password
    assert first.password_generated and not second.password_generated  # shown once, on the first start
    assert keys == json.loads((tmp_path / "h" / "secrets.json").read_text())
    assert keys["fernet_key"] != json.loads((tmp_path / "h2" / "secrets.json").read_text())["fernet_key"]
    assert f"port = {second.port}" in second.config_file.read_text()
    assert oct(os.stat(tmp_path / "h").st_mode & 0o777) == "0o700"
