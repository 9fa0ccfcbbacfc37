"""The Asset URI of a sink table, in Airflow's URI conventions for the sink's kind (pure).

- PostgreSQL: ``postgres://host:port/database/schema/table`` (the postgres provider's convention);
- Kafka sink: ``kafka://bootstrap/topic`` (the Kafka provider's);
- Delta Lake: the table's directory, ``file:///root/table`` (or ``s3://`` as written);
- SQLite has no convention: ``sqlite:///path/to/file.db/table`` (the database file's absolute path, then
  the table).

The table is the physical one: the sink's ``table_prefix`` included, so two streams sharing a database
never share an Asset.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from rewind.registry import StreamSpec
from rewind.settings import resolve_bootstrap
from rewind.sink.delta_target import is_delta_url, parse_delta_sink
from rewind.sink.kafka_target import is_kafka_url, parse_kafka_sink


def asset_uri(spec: StreamSpec, table: str) -> str:
    """The URI of ``table`` (a logical table name of the stream) as an Airflow Asset."""
    url = spec.sink.url
    if is_kafka_url(url):
        target = parse_kafka_sink(url, spec.sink.options)
        bootstrap = (resolve_bootstrap(target.bootstrap) or "localhost").split(",")[0]
        return f"kafka://{bootstrap}/{target.topic_prefix}{spec.sink.table_prefix}{table}"
    physical = f"{spec.sink.table_prefix}{table}"
    if is_delta_url(url):
        root = parse_delta_sink(url, spec.sink.options).root.rstrip("/")
        return f"{root}/{physical}" if "://" in root else f"file://{root}/{physical}"
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme in ("postgresql", "postgres"):
        host = parts.hostname or "localhost"
        database = parts.path.lstrip("/") or "postgres"
        return f"postgres://{host}:{parts.port or 5432}/{database}/public/{physical}"
    if scheme == "sqlite":
        path = url.split(":///", 1)[1] if ":///" in url else ""
        return f"sqlite://{Path(path).resolve()}/{physical}" if path else f"sqlite:///memory/{physical}"
    return f"{scheme}://{parts.hostname or ''}{parts.path}/{physical}"


def asset_name(stream: str, table: str) -> str:
    """The Asset's name: ``rewind.<stream>.<table>`` (what a DAG author schedules on, and what the
    watcher searches Airflow's events by)."""
    return f"rewind.{stream}.{table}"
