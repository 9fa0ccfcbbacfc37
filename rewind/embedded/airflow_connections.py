"""The embedded services as Airflow connections: ``AIRFLOW_CONN_*`` environment variables.

Given as environment variables (JSON form), the connections need no entry in Airflow's metadata
DB, so no credential is stored there, and every component and task of a local Airflow sees the
same ones. ``docker-compose.yaml`` writes the same three connections by hand.
"""

from __future__ import annotations

import json
from typing import Any

from rewind.embedded.services import PlatformInfo


def connections_env(info: PlatformInfo, spark_master: str = "local[2]") -> dict[str, str]:
    """``AIRFLOW_CONN_*`` variables (JSON form) for the embedded services.

    - ``rewind_kafka``: host and port of the (first) broker; ``extra`` has the whole list as
      ``bootstrap`` (what ``rewind_airflow.hooks.kafka.RewindKafkaHook`` reads) and as
      ``bootstrap.servers`` with other client settings (the Kafka provider's convention).
    - ``rewind_s3``: an ``aws`` connection: key and secret as login/password, the embedded S3 as
      ``endpoint_url`` (the Amazon provider's extra), ``region_name`` and ``bucket``.
    - ``spark_default``: what SparkSubmitHook reads: conn type ``spark`` with the master in
      ``host`` and no port becomes ``--master local[2]``; ``spark-submit`` is the venv's.
    """
    kafka_host, _, kafka_port = info.kafka_bootstrap.split(",")[0].rpartition(":")
    conns: dict[str, dict[str, Any]] = {
        "rewind_kafka": {
            "conn_type": "kafka",
            "description": "Rewind embedded Apache Kafka",
            "host": kafka_host,
            "port": int(kafka_port) if kafka_port.isdigit() else None,
            "extra": {"bootstrap": info.kafka_bootstrap, "bootstrap.servers": info.kafka_bootstrap,
                      "group.id": "rewind-airflow", "security.protocol": "PLAINTEXT"},
        },
        "rewind_s3": {
            "conn_type": "aws",
            "description": "Rewind embedded S3 (SeaweedFS)",
            "login": info.s3_access_key,
            "password": info.s3_secret_key,
            "extra": {"endpoint_url": info.s3_endpoint, "region_name": info.s3_region,
                      "bucket": info.bucket},
        },
        "spark_default": {
            "conn_type": "spark",
            "description": "Spark local mode",
            "host": spark_master,
            "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
        },
    }
    return {f"AIRFLOW_CONN_{name.upper()}": json.dumps({k: v for k, v in value.items() if v is not None})
            for name, value in conns.items()}
