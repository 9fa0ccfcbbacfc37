"""Rewind for Airflow, as a provider-style package: ``pip install rewind[airflow]`` into the Airflow you run.

- ``hooks/``: the connections: ``rewind_kafka`` (of the Apache Kafka provider's type ``kafka``),
  ``rewind_s3`` (the Amazon provider's ``aws``) and ``spark_default`` (the Spark provider's ``spark``: a
  stream's launch through spark-submit, detached on the worker or into YARN);
- ``triggers/`` and ``sensors/``: the deferrable watch over a running stream;
- ``operators/``: ``BaseOperator`` classes for supervision, savepoints, restores, proofs, replays and
  upgrades (each a thin call into the ``rewind`` package, which decides); ``operators/cluster.py`` is the
  supervisor's launch into YARN (no operator of its own);
- ``notify.py``: alerts through Airflow's notifiers (the registry's ``alerts``); ``deadlines.py``: the
  savepoint and DQ DAGs' Deadline Alerts, a late run told through the same notifiers;
- ``dags/factory.py``: the DAGs generated from the stream registry (wiring only);
- ``plugins/``: the Rewind page in Airflow's UI (registered through the ``airflow.plugins`` entry point:
  Airflow loads those always, a provider's declared plugins only when ``lazy_load_providers`` is off).

A DAG file of five lines (``dags/rewind_streams.py`` in the repository) puts the DAGs in a dags folder.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager lists for this package (the ``apache_airflow_provider`` entry point)."""
    return {
        "package-name": "rewind",
        "name": "Rewind",
        "description": "Recovery and replay for PySpark streams that read Kafka: supervision, savepoints, "
                       "replays and data-quality proofs.",
        "versions": [__version__],
        # No connection types: each hook reads a connection of a type another provider owns and registers
        # (with its form): ``rewind_kafka`` the Apache Kafka provider's ``kafka``, ``rewind_s3`` the Amazon
        # provider's ``aws``, ``spark_default`` the Spark provider's ``spark``. Airflow keeps whichever
        # provider registers a type first, and logs the clash.
        # Every module with a hook, operator, sensor or trigger class (tests/test_provider.py walks the package).
        "hooks": [{"integration-name": "Rewind", "python-modules": [
            "rewind_airflow.hooks.kafka", "rewind_airflow.hooks.s3", "rewind_airflow.hooks.stream"]}],
        "operators": [{"integration-name": "Rewind", "python-modules": [
            "rewind_airflow.operators.base", "rewind_airflow.operators.supervision",
            "rewind_airflow.operators.savepoint", "rewind_airflow.operators.proof", "rewind_airflow.operators.replay",
            "rewind_airflow.operators.upgrade"]}],
        "sensors": [{"integration-name": "Rewind", "python-modules": ["rewind_airflow.sensors.stream",
                                                                      "rewind_airflow.sensors.committed"]}],
        "triggers": [{"integration-name": "Rewind", "python-modules": ["rewind_airflow.triggers.committed",
                                                                     "rewind_airflow.triggers.committed_range",
                                                                     "rewind_airflow.triggers.health"]}],
    }
