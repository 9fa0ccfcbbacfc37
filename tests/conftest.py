"""Shared fixtures: real embedded services and one Spark session per test run."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rewind.services import EmbeddedPlatform, PlatformInfo  # noqa: E402


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformInfo]:
    """SeaweedFS + Tansu on free ports in a temp dir; stopped (SIGKILL if need be) at the end."""
    workdir = tmp_path_factory.mktemp("platform")
    plat = EmbeddedPlatform(workdir)
    info = plat.start()
    try:
        yield info
    finally:
        plat.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(platform: PlatformInfo) -> str:
    return platform.kafka_bootstrap


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a uniquely named topic with N partitions and return its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def make(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(timeout=15)
        return name

    return make


@pytest.fixture(scope="session")
def spark():
    """One local[2] session shared by all tests in the run (start-up costs ~10 s)."""
    from rewind.spark_session import build_session

    session = build_session("rewind-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the whole run: $REWIND_POSTGRES_URL, else a throwaway LocalPostgres.

    Skipped locally when PostgreSQL is not installed; in CI (CI=true) that is a failure, so the
    PostgreSQL tests can never pass by not running.
    """
    from rewind.pg import LocalPostgres, postgres_available

    external = os.environ.get("REWIND_POSTGRES_URL")
    if external:
        yield external
        return
    if not postgres_available():
        message = "PostgreSQL is not installed (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it")
        pytest.skip(message)
    with LocalPostgres() as pg:
        yield pg.url
