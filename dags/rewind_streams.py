"""Rewind's DAGs, generated from the stream registry ($REWIND_REGISTRY): rewind_airflow builds them."""

from rewind_airflow.dags.factory import build_dags

globals().update(build_dags())
