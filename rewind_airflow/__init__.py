"""Rewind for Airflow, as a provider-style package: ``pip install rewind[airflow]`` into the Airflow you run.

- ``hooks/``: the connections (``rewind_kafka`` of the Apache Kafka provider's type ``kafka``,
  ``rewind_s3`` of the Amazon provider's ``aws``) and the stream launch through spark-submit
  (``spark_default``);
- ``triggers/`` and ``sensors/``: the deferrable watch over a running stream;
- ``operators/``: ``BaseOperator`` classes for supervision, savepoints, restores, proofs and replays
  (each a thin call into the ``rewind`` package, which decides);
- ``notify.py``: alerts through Airflow's notifiers (the registry's ``alerts``);
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
        # No connection types: ``rewind_kafka`` is of the Apache Kafka provider's type ``kafka`` (that
        # provider owns it and its form; Airflow keeps whichever registers a type first, and logs the
        # clash), ``rewind_s3`` of the Amazon provider's ``aws``.
        "hooks": [{"integration-name": "Rewind", "python-modules": [
            "rewind_airflow.hooks.kafka", "rewind_airflow.hooks.s3", "rewind_airflow.hooks.stream"]}],
        "operators": [{"integration-name": "Rewind", "python-modules": [
            "rewind_airflow.operators.supervision", "rewind_airflow.operators.savepoint",
            "rewind_airflow.operators.proof", "rewind_airflow.operators.replay"]}],
        "sensors": [{"integration-name": "Rewind", "python-modules": ["rewind_airflow.sensors.stream",
                                                                      "rewind_airflow.sensors.committed"]}],
        "triggers": [{"integration-name": "Rewind", "python-modules": ["rewind_airflow.triggers.health"]}],
    }
