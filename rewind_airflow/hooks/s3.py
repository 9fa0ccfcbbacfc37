"""The ``rewind_s3`` connection: where savepoints, proofs and replay reports are stored.

An ``aws`` connection as the Amazon provider reads it: access key and secret as login and
password, ``endpoint_url`` (MinIO, SeaweedFS) and ``region_name`` in the extra, plus ``bucket``.
Without a connection, the environment answers (``rewind.storage.resolve_s3_config``; the embedded platform's
Airflow is started with it).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class RewindS3Hook(BaseHook):
    """Savepoint storage for Rewind's tasks: ``config()`` (a ``rewind.storage.S3Config``) and ``store()`` from the
    connection.

    :param s3_conn_id: the ``aws`` connection (default ``rewind_s3``); what it lacks, the environment or the
        embedded platform gives
    """

    conn_name_attr = "s3_conn_id"
    default_conn_name = "rewind_s3"
    conn_type = "aws"
    hook_name = "Rewind S3"

    def __init__(self, s3_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.s3_conn_id = s3_conn_id

    def config(self) -> Any:
        """A ``rewind.storage.S3Config`` from the connection, filling what it lacks from the environment."""
        from rewind.storage import S3Config, resolve_s3_config

        try:
            conn = self.get_connection(self.s3_conn_id)
        except Exception:  # noqa: BLE001 - no such connection
            return resolve_s3_config()
        extra = conn.extra_dejson or {}
        base = resolve_s3_config(extra.get("bucket"), require_bucket=False)
        return S3Config(extra.get("bucket") or base.bucket, extra.get("endpoint_url") or base.endpoint,
                        conn.login or base.access_key, conn.password or base.secret_key,
                        extra.get("region_name") or base.region)

    def store(self) -> Any:
        from rewind.storage import S3Storage

        return S3Storage(self.config())
