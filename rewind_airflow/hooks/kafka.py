"""The ``rewind_kafka`` connection: where Rewind's tasks find Kafka, and with which client settings.

The connection is of the Apache Kafka provider's type ``kafka`` (``KafkaBaseHook``; that provider
owns the type and its form in the UI: Rewind does not register it again) and follows its
convention: its ``extra`` is the client configuration (``bootstrap.servers``, ``security.protocol``,
``sasl.*``, ``ssl.*``; Java or librdkafka names, ``rewind.kafka.client_config`` translates), so one
connection serves both providers' hooks and operators. Any connection with such an ``extra`` (or
a host and port) works, of whatever type.
Without a connection, the environment or the embedded platform answers (as on the command line).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class RewindKafkaHook(BaseHook):
    """Kafka for Rewind's tasks: ``bootstrap()`` and ``client_config()`` from the connection.

    :param kafka_conn_id: the Kafka connection (default ``rewind_kafka``); without one, the environment
        (``REWIND_KAFKA_BOOTSTRAP``) or the embedded platform answers
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "rewind_kafka"
    conn_type = "kafka"
    hook_name = "Rewind Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def _extra(self) -> dict[str, Any] | None:
        try:
            conn = self.get_connection(self.kafka_conn_id)
        except Exception:  # noqa: BLE001 - no such connection: the environment answers
            return None
        extra = dict(conn.extra_dejson or {})
        if conn.host and "bootstrap.servers" not in extra and "bootstrap" not in extra:
            extra["bootstrap.servers"] = f"{conn.host}:{conn.port}" if conn.port else str(conn.host)
        return extra

    def bootstrap(self) -> str:
        """``bootstrap`` or ``bootstrap.servers`` of the extra, else host:port, else the environment."""
        extra = self._extra()
        if extra and (extra.get("bootstrap") or extra.get("bootstrap.servers")):
            return str(extra.get("bootstrap") or extra["bootstrap.servers"])
        from rewind.settings import resolve_bootstrap

        return resolve_bootstrap(None)

    def client_config(self) -> dict[str, str]:
        """The extra's client settings (security, timeouts) without the bootstrap and Rewind's own keys."""
        extra = self._extra() or {}
        return {str(k): str(v) for k, v in extra.items() if k not in ("bootstrap", "bootstrap.servers", "group.id")}

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: can the brokers be reached with these settings?"""
        from rewind.kafka.lookups import check_reachable

        try:
            check_reachable(self.bootstrap(), [], self.client_config())
        except Exception as exc:  # noqa: BLE001 - the UI shows the message
            return False, str(exc)
        return True, f"Kafka answered at {self.bootstrap()}"
