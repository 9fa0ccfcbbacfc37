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


def test_airflows_own_engine_waits_out_a_write_lock_held_longer_than_pysqlites_5_s(tmp_path: Path) -> None:
    """The embedded Airflow's components wait up to 30 s for SQLite's write lock (``airflow_sqlite``): Airflow's
    engine, configured from the file ``LocalAirflow`` writes, commits once a lock held 6.5 s past the start of its
    wait is released. With
    pysqlite's 5 s it failed on "database is locked", which killed `rewind up`'s triggerer in a full run."""
    import sqlite3
    import subprocess
    import sys
    import time

    af = LocalAirflow(tmp_path / "h", tmp_path / "d", tmp_path / "p", env={})
    af.home.mkdir(parents=True)
    af.write_config()
    db = af.home / "airflow.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")  # as Airflow's own connections set it
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    probe = ("import time\nfrom airflow import settings\nsettings.configure_orm()\nprint('ready', flush=True)\n"
             "t0 = time.monotonic()\nwith settings.engine.begin() as c:\n"
             "    c.exec_driver_sql('INSERT INTO t VALUES (2)')\nprint(round(time.monotonic() - t0, 1))\n")
    writer = subprocess.Popen([sys.executable, "-c", probe], env={**os.environ, **af.environment()},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready", writer.communicate()[1][-3000:]
    time.sleep(6.5)  # the lock outlives pysqlite's 5 s wait after the writer has started waiting
    holder.execute("COMMIT")
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err[-3000:]
    assert float(out.strip().splitlines()[-1]) >= 5.5, out  # it waited for the lock
    assert [r[0] for r in holder.execute("SELECT x FROM t ORDER BY x")] == [1, 2]
