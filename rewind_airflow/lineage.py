"""The launching task as the OpenLineage parent of the Spark job it submits (a stream's driver, a replay).

Why: a stream's lineage (``rewind.lineage``) names the Airflow task that launched it, so that a backend
shows the supervisor's launch (and its DAG run) above the stream's run. Airflow's OpenLineage provider
does this for its Spark operators with ``spark.openlineage.parent*`` properties on the submit
(``[openlineage] spark_inject_parent_job_info``); Rewind's launches always add them, the same way:

- with ``apache-airflow-providers-openlineage`` installed, through its public helper
  ``inject_parent_job_information_into_spark_properties`` (its namespace, its ids, its reading of a DAG
  run's ``openlineage`` conf);
- without it, computed as the provider 2.x computes them (``rewind.lineage.parent.spark_properties``), the
  namespace from ``[openlineage] namespace``, else ``OPENLINEAGE_NAMESPACE``, else ``default``.

Rewind does not install the provider: it would load its listener into every Airflow process (scheduler,
workers, triggerer) and report every task, which is a deployment's choice, and the ids are two lines over
the OpenLineage client's ``generate_static_uuid``. Outside a running task (a test, the CLI) there is no
parent and nothing is added.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["parent_spark_conf"]


def _namespace() -> str:
    try:
        from airflow.configuration import conf

        configured = conf.get("openlineage", "namespace", fallback="")
    except Exception:  # noqa: BLE001 - no Airflow config here: the provider's fallbacks
        configured = ""
    return configured or os.environ.get("OPENLINEAGE_NAMESPACE") or "default"


def parent_spark_conf(context: Any = None) -> dict[str, str]:
    """The provider's six ``spark.openlineage.parent*``/``rootParent*`` properties for the running task
    (``context``: its template context, else the current one); empty outside a task or when they cannot be
    computed (logged: a launch never fails for lineage)."""
    if context is None:
        try:
            from airflow.sdk import get_current_context

            context = get_current_context()
        except Exception:  # noqa: BLE001 - not inside a running task: no parent to name
            return {}
    try:
        try:
            from airflow.providers.openlineage.utils.spark import (
                inject_parent_job_information_into_spark_properties,
            )
        except ImportError:
            from rewind.lineage.parent import spark_properties

            ti, dag_run = context["ti"], context["dag_run"]
            logical = getattr(dag_run, "logical_date", None) or dag_run.run_after
            map_index = getattr(ti, "map_index", None)
            return spark_properties(_namespace(), ti.dag_id, ti.task_id, int(ti.try_number), logical,
                                    -1 if map_index is None else int(map_index),
                                    int(getattr(dag_run, "clear_number", 0) or 0))
        return {str(k): str(v) for k, v in inject_parent_job_information_into_spark_properties({}, context).items()}
    except Exception as exc:  # noqa: BLE001 - lineage never fails a launch
        log.warning("no OpenLineage parent for the submit: %s: %s", type(exc).__name__, exc)
        return {}
