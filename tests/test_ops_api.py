"""The savepoint DAG's restore path and the local Airflow's extra users, without a running Airflow.

The page and its API inside a real Airflow (authentication, authorization, refusals, triggers) are
proven in tests/test_airflow_stack.py, on the one Airflow of that module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harness.registry_templates import demo_stream, write_registry

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

    from rewind.embedded.airflow_local import LocalAirflow

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
