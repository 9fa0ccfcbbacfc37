"""Shared fixtures: real embedded services and one Spark session per test run."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rewind.embedded.services import EmbeddedPlatform, PlatformInfo  # noqa: E402
from rewind.runtime.processes import PORT_CLASS_ENV  # noqa: E402

# -- the whole run ---------------------------------------------------------------------------------
# `make test` runs the suite in 2 pytest-xdist workers (a module never splits: --dist loadfile). The
# workers share nothing but the machine: each starts its own platform, Spark session and, if it needs
# them, Airflow and PostgreSQL; they hand out ports of disjoint classes.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw"):
    os.environ[PORT_CLASS_ENV] = f"{int(_WORKER[2:])}/{os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')}"

# Airflow reads its home when first imported. Several modules import it into this process (hooks,
# DAG factories); without a home set first it loads ~/airflow, and test_dags' dag.test() then finds
# no tables (CI rehearsal 2026-11-25: the modules ran in another order in a worker). One throwaway
# home per process, set before any test module is imported; test_dags migrates its database.
if not os.environ.get("AIRFLOW_HOME"):
    import atexit
    import shutil
    import tempfile

    _AIRFLOW_HOME = tempfile.mkdtemp(prefix="rewind-tests-airflow-")
    os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)

# Every Spark JVM the tests start (this process's session, the stream and replay drivers they launch,
# spark-submit from Airflow) compiles with C1 only and collects with the serial collector. The tests'
# JVMs live seconds to minutes on small batches, where C2's compile threads cost more CPU on 2 cores
# than its code saves. Measured 2026-11-25 (2-core EPYC, quiet): a stream driver's restart 19.5 s ->
# 15.8 s; test_checkpoint_scaling + test_late_routing's skew test 321.7 s -> 269.3 s. Rewind itself
# does not set these: a long-running stream wants C2.
# And they map a class-data-sharing archive of Spark's classes, built once per machine (harness/spark_cds.py:
# a JVM's start 10.8 -> 5.8 s of CPU).
# The embedded Kafka brokers too (KAFKA_JVM_PERFORMANCE_OPTS, as Kafka's own scripts read it): a test's broker
# lives a module at most.
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
if "SPARK_SUBMIT_OPTS" not in os.environ:
    from harness.spark_cds import spark_cds_options

    os.environ["SPARK_SUBMIT_OPTS"] = spark_cds_options("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

#: Modules handed out first, longest first, so the workers finish together (the rest follow in file
#: order). From the local run of 2026-11-29 (d9095ae, 3,396 s; per-module sums of its durations), test_yarn
#: less its second relaunch; the modules of session 9 (assets, real-time Kafka and upgrade, lineage) placed by
#: their durations in the CI rehearsal of 2026-11-29 23:10 (2,458 s with them in file order); re-measure after
#: changing them.
#: test_dags' dag.test() runs need Airflow's settings read after its DAGs folder is set: harness/dag_runs.py
#: resets them when another module imported Airflow first in the same worker.
LONGEST_FIRST = ["test_upgrade", "test_yarn", "test_dags", "test_ui_browser", "test_chaos", "test_stream_assets",
                 "test_late_routing", "test_replay_run", "test_spark_cluster", "test_realtime",
                 "test_any_stream_aggregates", "test_celery_hosts", "test_proof_mutations", "test_realtime_kafka",
                 "test_standby", "test_source_conformance", "test_exactly_once_crash",
                 "test_repartition", "test_savepoint_roundtrip", "test_broker_failover", "test_operations",
                 "test_hosts_fencing", "test_restore_replan", "test_services", "test_lineage", "test_inventory",
                 "test_delta_sink",
                 "test_kafka_sasl", "test_install", "test_airflow_stack", "test_checkpoint_s3a",
                 "test_checkpoint_scaling", "test_sink_commit_points", "test_dq", "test_scaffold", "test_kafka_sink",
                 "test_sink", "test_staging"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: a module keeps its order


if TYPE_CHECKING:
    from rewind.embedded.airflow_local import LocalAirflow
    from rewind.embedded.kafka_broker import KafkaCluster


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformInfo]:
    """SeaweedFS + Apache Kafka (one KRaft node) on free ports in a temp dir; stopped (SIGKILL if need be)
    at the end. Shared by the whole run: topics are unique per test (``new_topic``)."""
    workdir = tmp_path_factory.mktemp("platform")
    plat = EmbeddedPlatform(workdir)
    info = plat.start()
    try:
        yield info
    finally:
        plat.stop()


@pytest.fixture(scope="session")
def airflow_factory(platform: PlatformInfo, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[Callable[..., "LocalAirflow"]]:
    """Start a real Airflow (api-server, scheduler, dag-processor, triggerer; ~25 s) on free ports.

    ``make(env={...}, dags=..., plugins=...)``: the repo's dags/ and an empty plugins folder by default
    (the Rewind page comes from the installed package: entry point airflow.plugins), the
    platform's connections and variables, ``PYTHONPATH`` = the repo; ``env`` is added (e.g.
    ``REWIND_REGISTRY``, read when the DAGs are parsed). Every Airflow started is stopped at the end.
    """
    from rewind.embedded.airflow_local import LocalAirflow

    started: list[LocalAirflow] = []

    def make(env: dict[str, str] | None = None, dags: Path | None = None, plugins: Path | None = None,
             **kwargs: object) -> LocalAirflow:
        home = tmp_path_factory.mktemp("airflow")
        full_env = {**platform.env(), "REWIND_HOME": str(home / "rewind"), "PYTHONPATH": str(ROOT), **(env or {})}
        af = LocalAirflow(home / "airflow_home", dags or ROOT / "dags", plugins or home / "plugins", env=full_env,
                          platform=platform, **kwargs)  # type: ignore[arg-type]
        started.append(af)
        return af.start(timeout=300)

    try:
        yield make
    finally:
        for af in started:  # a test stops its own when done (an idle Airflow still takes CPU); these are left
            af.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(platform: PlatformInfo) -> str:
    return platform.kafka_bootstrap


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator["KafkaCluster"]:
    """Three KRaft nodes on localhost (each broker and voter; replication factor 3, min ISR 2), for
    failover tests; one per test module that asks for it."""
    from rewind.embedded.kafka_broker import KafkaCluster

    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:  # a throwaway cluster: SIGKILL (a controlled shutdown of the last voters waits out its grace, ~20 s)
        for node in cluster.nodes:
            node.kill()


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
    from rewind.driver.spark_session import build_session

    session = build_session("rewind-tests", delta=True)  # in-process Delta sinks written from the executors
    yield session
    session.stop()
    # py4j logs from __del__ at interpreter exit, after pytest closed the streams ("Logging error").
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the whole run: $REWIND_POSTGRES_URL, else a throwaway LocalPostgres.

    Skipped locally when PostgreSQL is not installed; in CI (CI=true) that is a failure, so the
    PostgreSQL tests can never pass by not running.
    """
    from tests.harness.pg import LocalPostgres
    from tests.harness.pg_install import postgres_available

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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for the SQL sink tests: a SQLite file in tmp_path, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sink' / 'rewind.db'}"  # 'sink/' does not exist yet: the sink creates it
        return
    from tests.harness.pg_databases import create_database, drop_database

    server = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = create_database(server, name)
    try:
        yield url
    finally:
        drop_database(server, name)


@pytest.fixture(scope="module")
def airflow_env() -> Iterator[dict[str, str]]:
    """The process's throwaway AIRFLOW_HOME (set above, before Airflow is first imported, whichever module imports
    it) with a migrated SQLite DB, for the DAGs' ``dag.test()`` (test_dags, test_realtime's supervisor)."""
    from tests.harness.dag_runs import migrated_airflow

    if str(ROOT / "dags") not in sys.path:
        sys.path.insert(0, str(ROOT / "dags"))
    with migrated_airflow() as env:
        yield env
