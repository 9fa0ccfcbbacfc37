"""Rewind's DAGs run with ``dag.test()`` in the test process: a migrated Airflow home, and the runs' task states.

The process's throwaway ``AIRFLOW_HOME`` is set by conftest.py before Airflow is first imported; this migrates
its database once and points the DAGs folder at the repository's ``dags/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def migrated_airflow() -> Iterator[dict[str, str]]:
    home = Path(os.environ["AIRFLOW_HOME"])
    env = {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # Airflow reads its DAGs folder once, when ``airflow.settings`` is first imported; a module that imported
    # Airflow earlier in this process (another test module in the same worker) fixed it to the default.
    from airflow import settings as airflow_settings
    from airflow.configuration import conf

    saved_folder = airflow_settings.DAGS_FOLDER
    conf.set("core", "dags_folder", env["AIRFLOW__CORE__DAGS_FOLDER"])
    airflow_settings.DAGS_FOLDER = env["AIRFLOW__CORE__DAGS_FOLDER"]
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                   env={**os.environ, **env}, timeout=300)
    try:
        yield env
    finally:
        airflow_settings.DAGS_FOLDER = saved_folder
        conf.set("core", "dags_folder", saved_folder)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def states(run: Any) -> dict[str, str]:
    """task id -> its state (``success``, ``failed``, ``skipped``...) in a finished ``dag.test()`` run."""
    return {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}


def xcom(run: Any, task_id: str) -> Any:
    """What a task of a finished ``dag.test()`` run returned."""
    ti = next(t for t in run.get_task_instances() if t.task_id == task_id)
    return ti.xcom_pull(task_ids=task_id)


def watching(dag_id: str) -> bool:
    """Whether a run of the supervisor ``dag_id`` has its ``watch`` task under way (under ``dag.test()`` a watch
    on its trigger shows as queued, not deferred): a kill before that meets the run's ``launch``, not its watch."""
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(TaskInstance).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.task_id == "watch",
            TaskInstance.state.in_(("queued", "running", "deferred"))).count() > 0
