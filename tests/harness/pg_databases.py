"""Databases on a running PostgreSQL server: one fresh database per test.

Why: tests use one fresh database each, so they never see each other's tables -- on the
throwaway server (`tests.harness.pg.LocalPostgres`) or on the one ``$REWIND_POSTGRES_URL``
names. CREATE and DROP DATABASE cannot run in a transaction, so these connect in autocommit
mode, to the server's maintenance database unless the URL names another.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["check_db_name", "create_database", "drop_database"]

_DB_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def _admin_connect(url: str) -> Any:
    """A psycopg2 connection in autocommit mode (CREATE/DROP DATABASE cannot run in a transaction)."""
    import psycopg2  # lazy: only the PostgreSQL paths need it

    u = make_url(url)
    conn = psycopg2.connect(
        host=u.host, port=u.port, user=u.username, password=u.password,
        dbname=u.database or "postgres", connect_timeout=10,
    )
    conn.autocommit = True
    return conn


def check_db_name(name: str) -> None:
    """A database name safe to quote into CREATE/DROP DATABASE; raises ValueError."""
    if not _DB_NAME_RE.match(name):
        raise ValueError(f"invalid database name {name!r}: must match {_DB_NAME_RE.pattern}")


def create_database(url: str, name: str) -> str:
    """Create database `name` on the server of `url` (drop it first if present); return its URL.

    Tests use one fresh database each, so they never see each other's tables.
    """
    check_db_name(name)
    conn = _admin_connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str, name: str) -> None:
    """Drop database `name` (terminating its sessions first); a missing database is fine."""
    check_db_name(name)
    conn = _admin_connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        conn.close()
