"""The embedded Airflow's metadata database settings: its own SQLite file unless a database URL is given.

Why the connect arguments: pysqlite waits 5 s for SQLite's write lock, and Airflow's components then fail on
"database is locked". On 2 busy cores a transaction of one component held the lock longer, and `rewind up`'s
triggerer died of it (tests/test_ui_browser.py in a full run, 2026-11-30), which ends `rewind up` as any dead
component does. So the scheduler, the DAG processor and the triggerer wait 30 s (the sinks' own SQLite busy
timeout, ``rewind.sink.dialects``). Airflow reads them by import path (``[database] sql_alchemy_connect_args``
and its async twin). Airflow turns on WAL itself.

Not the API server: its audit log (``action_logging``, an ``async`` dependency) writes through a synchronous
session on the event loop's thread, so while it waits for the lock no request of that server moves, including
the one in a worker thread that holds the lock and needs the loop to finish. The server is stuck for as long
as the wait: with 30 s, CI of 54bed2e saw three requests end together after 30.4 s (500, 200, 500). It keeps
pysqlite's 5 s (``component_env``): a request that fails on the lock answers 500, which the clients retry.

A PostgreSQL metadata database (the Celery stack) gets none of this: its driver takes no ``timeout``.
"""

from __future__ import annotations

from pathlib import Path

#: ``[database] sql_alchemy_connect_args`` (Airflow adds ``check_same_thread`` to it for SQLite).
CONNECT_ARGS: dict[str, object] = {"timeout": 30.0}
#: ``[database] sql_alchemy_connect_args_async`` (aiosqlite hands it to sqlite3.connect).
ASYNC_CONNECT_ARGS: dict[str, object] = {"timeout": 30.0}
#: The API server's (see the module docstring): pysqlite's own default.
API_SERVER_CONNECT_ARGS: dict[str, object] = {"timeout": 5.0}


def database_settings(database_url: str | None, sqlite_file: Path) -> dict[str, str]:
    """The ``[database]`` section: ``database_url``, else ``sqlite_file`` with the longer lock wait."""
    if database_url:
        return {"sql_alchemy_conn": database_url}
    return {"sql_alchemy_conn": f"sqlite:///{sqlite_file}",
            "sql_alchemy_connect_args": f"{__name__}.CONNECT_ARGS",
            "sql_alchemy_connect_args_async": f"{__name__}.ASYNC_CONNECT_ARGS"}


def component_env(component: str, database_url: str | None) -> dict[str, str]:
    """What one component's environment overrides in the ``[database]`` section: the API server's shorter wait."""
    if database_url or component != "api-server":
        return {}
    short = f"{__name__}.API_SERVER_CONNECT_ARGS"
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": short,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": short}
