"""The datasets of a stream as the OpenLineage naming spec names them: its Kafka topics, its sink's tables.

Why by the spec's names: a lineage backend (Marquez, DataHub, a cloud catalog) joins datasets across
producers by ``(namespace, name)``, so a table this stream writes must carry the name that the Airflow task,
the dbt model or the Spark job reading it reports. The spec's rules (``spec/Naming.md`` of OpenLineage):

| dataset | namespace | name |
|---|---|---|
| Kafka topic | ``kafka://{bootstrap host}:{port}`` (the first bootstrap server) | the topic |
| PostgreSQL table | ``postgres://{host}:{port}`` | ``{database}.{schema}.{table}`` (schema ``public``) |
| other SQL (MySQL...) | ``{scheme}://{host}:{port}`` | ``{database}.{table}`` |
| SQLite table (not in the spec) | ``sqlite://{absolute path of the database file}`` | the table |
| Delta table (local) | ``file`` | the table's directory, an absolute path |

Pure: URL parsing only, nothing is opened. A sink URL's user and password never reach a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["DatasetName", "kafka_namespace", "sink_datasets", "topic_datasets"]

#: Default ports: a URL without one names the same server as one with it.
DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521, "kafka": 9092}


@dataclass(frozen=True)
class DatasetName:
    """One dataset: its OpenLineage namespace and name, and the sink table (spec name) it holds, if any."""

    namespace: str
    name: str
    table: str | None = None


def _host_port(netloc: str, scheme: str) -> str:
    """``host:port`` of a URL's network location, without credentials, with the scheme's default port."""
    host = netloc.rsplit("@", 1)[-1]
    if not host:
        return "localhost"
    if host.startswith("["):  # an IPv6 literal keeps its brackets
        end = host.find("]")
        name, rest = host[:end + 1], host[end + 1:]
        return f"{name}{rest}" if rest.startswith(":") else f"{name}:{DEFAULT_PORTS.get(scheme, 0)}"
    if ":" in host:
        return host
    return f"{host}:{DEFAULT_PORTS[scheme]}" if scheme in DEFAULT_PORTS else host


def kafka_namespace(bootstrap: str) -> str:
    """``kafka://host:port`` of the first server of a bootstrap list (``a:9092,b:9092``)."""
    first = bootstrap.split(",")[0].strip()
    for prefix in ("PLAINTEXT://", "SSL://", "SASL_SSL://", "SASL_PLAINTEXT://"):  # a listener-style entry
        if first.upper().startswith(prefix):
            first = first[len(prefix):]
    return f"kafka://{_host_port(first, 'kafka')}"


def topic_datasets(topics: list[str], bootstrap: str) -> list[DatasetName]:
    """The stream's input topics."""
    namespace = kafka_namespace(bootstrap)
    return [DatasetName(namespace, t) for t in topics]


def _sql_scheme(scheme: str) -> str:
    """``postgresql+psycopg2`` -> ``postgres``: the dialect, as the naming spec spells it."""
    dialect = scheme.split("+")[0].lower()
    return {"postgresql": "postgres", "postgres": "postgres"}.get(dialect, dialect)


def sink_datasets(url: str, physical: dict[str, str], bootstrap: str | None = None,
                  schema: str | None = None) -> list[DatasetName]:
    """The datasets a sink writes: ``physical`` maps each spec table name to the name the sink gives it
    (``table_prefix`` + name, a Kafka sink's topic, a Delta table's directory name).

    ``bootstrap``: the platform's Kafka, for a ``kafka://`` sink URL that names no brokers. ``schema``: the
    PostgreSQL schema (``public`` when the URL's ``options=-csearch_path=...`` does not say)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme == "delta":
        root = unquote(parts.path).rstrip("/")
        return [DatasetName("file", f"{root}/{p}", t) for t, p in physical.items()]
    if scheme == "kafka":
        brokers = parts.netloc or bootstrap or "localhost:9092"
        prefix = parts.path.lstrip("/")
        return [DatasetName(kafka_namespace(brokers), f"{prefix}{p}", t) for t, p in physical.items()]
    dialect = _sql_scheme(scheme)
    if dialect == "sqlite":
        path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
        where = str(Path(path).resolve()) if path and path != ":memory:" else ":memory:"
        return [DatasetName(f"sqlite://{where}", p, t) for t, p in physical.items()]
    namespace = f"{dialect}://{_host_port(parts.netloc, dialect)}"
    database = unquote(parts.path.lstrip("/")) or "default"
    if dialect == "postgres":
        within = schema or _search_path(parts.query) or "public"
        return [DatasetName(namespace, f"{database}.{within}.{p}", t) for t, p in physical.items()]
    return [DatasetName(namespace, f"{database}.{p}", t) for t, p in physical.items()]


def _search_path(query: str) -> str | None:
    """The first schema of ``options=-csearch_path=a,b`` in a PostgreSQL URL's query, if it says one."""
    for item in query.split("&"):
        key, _, value = item.partition("=")
        text = unquote(value)
        if key == "options" and "search_path=" in text:
            return text.split("search_path=", 1)[1].split(",")[0].split()[0] or None
    return None
