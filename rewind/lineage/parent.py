"""The parent run of a driver or replay: the Airflow task that launched it, as the OpenLineage provider says it.

Why these keys: Airflow's OpenLineage provider hands a Spark submit its task's identity as Spark properties
(``inject_parent_job_information_into_spark_properties``: ``spark.openlineage.parentJobNamespace``,
``parentJobName``, ``parentRunId`` and the ``rootParent*`` three for the DAG run), and OpenLineage's Spark
integration reads them into the ``parent`` run facet. Rewind's launches write the same keys
(``rewind_airflow.lineage``) and its driver reads them, so a backend links the stream's run to the task's
run the provider itself reports, whether the provider is installed or not.

The ids are the provider's (2.x), computed here the same way: a task instance's run id is the client's
deterministic UUIDv7 (``generate_static_uuid``) of its logical date and
``{namespace}.{dag_id}.{task_id}.{try_number}.{map_index}``; the DAG run's, of
``{namespace}.{dag_id}.{clear_number}``; the job names ``{dag_id}.{task_id}`` and ``{dag_id}``.

A job launched outside Spark's conf (a test, a shell) may say its parent in the environment instead, as
OpenLineage's other integrations read it: ``OPENLINEAGE_PARENT_ID`` and ``OPENLINEAGE_ROOT_PARENT_ID``, each
``{namespace}/{job name}/{run id}``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

__all__ = ["KEYS", "Parent", "dag_run_id", "parent_from", "spark_properties", "task_run_id"]

PREFIX = "spark.openlineage."
#: The provider's Spark properties, in its order.
KEYS = ("parentJobNamespace", "parentJobName", "parentRunId", "rootParentRunId", "rootParentJobName",
        "rootParentJobNamespace")
ENV_PARENT = "OPENLINEAGE_PARENT_ID"
ENV_ROOT = "OPENLINEAGE_ROOT_PARENT_ID"


@dataclass(frozen=True)
class Parent:
    """The run that launched this one, and the run at the top of the chain (the DAG run), if known."""

    namespace: str
    name: str
    run_id: str
    root_namespace: str | None = None
    root_name: str | None = None
    root_run_id: str | None = None

    @property
    def has_root(self) -> bool:
        return bool(self.root_namespace and self.root_name and self.root_run_id)


def _uuid(text: str | None) -> str | None:
    try:
        return str(uuid.UUID(str(text))) if text else None
    except ValueError:
        return None


def _triple(text: str | None) -> tuple[str, str, str] | None:
    """``namespace/name/run id`` (the name may hold ``/``), or None when it is not one."""
    if not text or text.count("/") < 2:
        return None
    namespace, rest = text.split("/", 1)
    name, run_id = rest.rsplit("/", 1)
    run = _uuid(run_id)
    return (namespace, name, run) if namespace and name and run else None


def parent_from(conf: Mapping[str, str], env: Mapping[str, str]) -> Parent | None:
    """The parent from Spark's conf (the provider's keys), else from the environment; None when neither says
    one whole (a namespace, a name and a UUID run id). A root is kept only when whole too."""
    got = {k: conf.get(PREFIX + k) for k in KEYS}
    run = _uuid(got["parentRunId"])
    if run and got["parentJobNamespace"] and got["parentJobName"]:
        root = _uuid(got["rootParentRunId"])
        whole = root and got["rootParentJobName"] and got["rootParentJobNamespace"]
        return Parent(str(got["parentJobNamespace"]), str(got["parentJobName"]), run,
                      got["rootParentJobNamespace"] if whole else None, got["rootParentJobName"] if whole else None,
                      root if whole else None)
    triple = _triple(env.get(ENV_PARENT))
    if triple is None:
        return None
    root_triple = _triple(env.get(ENV_ROOT))
    return Parent(*triple, *(root_triple or (None, None, None)))


def task_run_id(namespace: str, dag_id: str, task_id: str, try_number: int, logical_date: datetime,
                map_index: int = -1) -> str:
    """The provider's run id of a task instance (``build_task_instance_ol_run_id``)."""
    from openlineage.client.uuid import generate_static_uuid

    data = f"{namespace}.{dag_id}.{task_id}.{try_number}.{map_index}".encode()
    return str(generate_static_uuid(instant=logical_date, data=data))


def dag_run_id(namespace: str, dag_id: str, logical_date: datetime, clear_number: int = 0) -> str:
    """The provider's run id of a DAG run (``build_dag_run_ol_run_id``)."""
    from openlineage.client.uuid import generate_static_uuid

    return str(generate_static_uuid(instant=logical_date, data=f"{namespace}.{dag_id}.{clear_number}".encode()))


def spark_properties(namespace: str, dag_id: str, task_id: str, try_number: int, logical_date: datetime,
                     map_index: int = -1, clear_number: int = 0) -> dict[str, str]:
    """The six properties the provider injects into a Spark submit for this task instance."""
    values = (namespace, f"{dag_id}.{task_id}", task_run_id(namespace, dag_id, task_id, try_number, logical_date,
                                                          map_index),
              dag_run_id(namespace, dag_id, logical_date, clear_number), dag_id, namespace)
    return {PREFIX + k: v for k, v in zip(KEYS, values, strict=True)}
