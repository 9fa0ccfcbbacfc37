"""The local Airflow's configuration: connections as ``AIRFLOW_CONN_*`` JSON, a home's kept password and keys.

A real local Airflow (login, health, a deferred task, connections, an import error, a clean stop) is
driven through its REST API in tests/test_airflow_stack.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rewind.embedded.airflow_connections import connections_env
from rewind.embedded.airflow_local import LocalAirflow
from rewind.embedded.services import PlatformInfo


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
