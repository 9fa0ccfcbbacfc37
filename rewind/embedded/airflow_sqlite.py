"""The embedded Airflow's metadata database settings: its own SQLite file unless a database URL is given.

Why the connect arguments: pysqlite waits 5 s for SQLite's write lock, and Airflow's components then fail on
"database is locked". On 2 busy cores a transaction of one component held the lock longer, and `rewind up`'s
triggerer died of it (tests/test_ui_browser.py in a full run, 2026-11-30), which ends `rewind up` as any dead
component does. Airflow reads them by import path (``[database] sql_alchemy_connect_args`` and its async twin);
30 s is the sinks' own SQLite busy timeout (``rewind.sink.dialects``). Airflow turns on WAL itself. A
PostgreSQL metadata database (the Celery stack) gets none: its driver takes no ``timeout``.
"""

from __future__ import annotations

from pathlib import Path

#: ``[database] sql_alchemy_connect_args`` (Airflow adds ``check_same_thread`` to it for SQLite).
CONNECT_ARGS: dict[str, object] = {"timeout": 30.0}
#: ``[database] sql_alchemy_connect_args_async`` (aiosqlite hands it to sqlite3.connect).
ASYNC_CONNECT_ARGS: dict[str, object] = {"timeout": 30.0}


def database_settings(database_url: str | None, sqlite_file: Path) -> dict[str, str]:
    """The ``[database]`` section: ``database_url``, else ``sqlite_file`` with the longer lock wait."""
    if database_url:
        return {"sql_alchemy_conn": database_url}
    return {"sql_alchemy_conn": f"sqlite:///{sqlite_file}",
            "sql_alchemy_connect_args": f"{__name__}.CONNECT_ARGS",
            "sql_alchemy_connect_args_async": f"{__name__}.ASYNC_CONNECT_ARGS"}
