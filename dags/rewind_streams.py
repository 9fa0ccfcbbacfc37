"""Rewind's DAGs, generated from the stream registry (thin: rewind_airflow.dag_factory builds them)."""

from rewind_airflow.dag_factory import build_dags

globals().update(build_dags())
