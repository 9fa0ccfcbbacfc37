"""Rewind: recovery and replay for PySpark streams that read Kafka (never imports Airflow)."""

__version__ = "0.1.0"
