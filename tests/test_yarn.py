"""Rewind on Apache Hadoop YARN: drivers inside the cluster (cluster deploy mode), checkpoints on S3.

One YARN cluster for the module (a ResourceManager and two NodeManagers from .jars/yarn, the second one for
the node that is lost), on the session's platform (Kafka, SeaweedFS). The scenario test moves one stream
from the embedded default (``local[2]``, a local checkpoint) onto YARN, loses there the node running its
driver mid-batch under the supervisor DAG, is upgraded there from an MWAA-style Airflow and ends with a
savepoint restorable back on the embedded default; every leg ends with the proof by the
data (every Kafka offset against the sink: 0 duplicates, 0 missing). The last test stops the cluster and
finds no process of it left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness.dag_runs import migrated_airflow, states, xcom
from harness.mwaa import MwaaInstall, mwaa_install
from harness.processes import wait_for as wait

from rewind.control.status_store import read_stream_status
from rewind.demo.producer import ProduceSpec, produce
from rewind.embedded.services import PlatformInfo
from rewind.embedded.yarn import Container, YarnCluster
from rewind.faults import Fault, arm
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from rewind.runtime.processes import pid_alive
from rewind.runtime.yarn_rm import stream_tag
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
STREAM = "ymig"
NODE_MB = 4096
NEW_TRANSFORM = "ymig_v2:DemoWithCents"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    # 4 GB a node (2 GB by default): the survivor of the lost node hosts the stream and an upgrade's pre-flight
    cluster = YarnCluster(tmp_path_factory.mktemp("yarn"), nodes=2, node_memory_mb=NODE_MB)
    with cluster:
        cluster.spark_defaults(sys.executable)
        print(f"YARN up in {cluster.startup_s:.1f}s: {cluster.rm_settings.web_url}")
        yield cluster


@pytest.fixture
def yarn_env(yarn: YarnCluster, platform: PlatformInfo, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What an Airflow worker that submits to this cluster has: the platform's services, HADOOP_CONF_DIR, the
    deployment's spark-defaults.conf, and a Spark connection in cluster mode."""
    env = {**platform.env(), **yarn.info().env(), "REWIND_S3_BUCKET": platform.bucket,
           "SPARK_CONF_DIR": str(yarn.workdir / "spark-conf"), "REWIND_HOME": str(tmp_path / "home"),
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "yarn", "extra": {
               "deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": yarn.rm_settings.web_url}}),
           "AIRFLOW_CONN_REWIND_KAFKA": json.dumps({"conn_type": "generic",
                                                    "extra": {"bootstrap": platform.kafka_bootstrap}})}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def test_yarn_is_a_component_of_the_platform(yarn: YarnCluster) -> None:
    """The ResourceManager answers its REST API, both NodeManagers registered with what they offer, each daemon
    on ports and directories of its own with its log kept."""
    info = yarn.rest.cluster_info()
    assert info["state"] == "STARTED" and info["haState"] == "ACTIVE" and info["hadoopVersion"] == "3.5.0"
    nodes = yarn.rest.running_nodes()
    assert len(nodes) == 2 and all(n.available_mb + n.used_mb == NODE_MB for n in nodes), nodes
    assert {yarn.node_of(n.node_id) for n in nodes} == {0, 1}
    for name, log in yarn.info().logs.items():
        assert Path(log).stat().st_size > 0, name
    dirs = {d for n in yarn.nm_settings for d in (n.local_dir, n.log_dir)}
    assert len(dirs) == 4 and all(Path(d).is_dir() for d in dirs)


@pytest.fixture(scope="module")
def airflow_home() -> Iterator[dict[str, str]]:
    with migrated_airflow() as env:
        yield env


def driver_jvm(yarn: YarnCluster, app_id: str) -> Container | None:
    """The JVM of the application's first container: the ApplicationMaster, which in cluster mode is the driver
    (its Python process is its child)."""
    return next((c for c in yarn.containers() if c.app_id == app_id and c.is_application_master
                 and c.argv and c.argv[0].endswith("java") and "ApplicationMaster" in " ".join(c.argv)), None)


def rewind_cli(*args: str, registry: Path) -> dict[str, Any]:
    """``rewind ...  --json`` as an operator runs it; its JSON answer."""
    run = subprocess.run([sys.executable, "-m", "rewind.cli", *args, "--registry", str(registry), "--json"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def proven(spec: Any, bootstrap: str, everything: bool = False) -> dict[str, Any]:
    """``rewind verify``: every Kafka record up to the stream's last committed batch (``everything``: all of them)
    against its sink and dead letters; 0 duplicates and 0 missing."""
    from rewind.proof.verify import committed_bounds

    status = read_stream_status(spec)
    bounds = None if everything or status is None else committed_bounds(status.end_offsets)
    summary = verify_stream(spec, bootstrap, bounds).summary()
    assert summary["ok"], summary
    assert summary["duplicate_event_rows"] == 0 and summary["missing_events"]["count"] == 0, summary
    return dict(summary)


def upgrade_from_mwaa(install: MwaaInstall, dags: Path, airflow: dict[str, str], env: dict[str, str],
                      registry: Path, entry: str, workdir: Path) -> str:
    """``rewind_upgrade`` run as an Airflow worker installed the MWAA way runs it (``airflow dags test``): its
    own Python with no full PySpark, the DAGs and plugins folders only, a Spark installation's spark-submit
    (``SPARK_HOME``, as the deployment provides it) and the deployment's REWIND_JARS; its output."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    run_env = {**install.env, **airflow, **env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
               "AIRFLOW__CORE__PLUGINS_FOLDER": str(install.plugins), "REWIND_REGISTRY": str(registry),
               "REWIND_JARS": str(ROOT / ".jars"), "SPARK_HOME": str(spark_home),
               "PATH": os.pathsep.join([str(spark_home / "bin"), install.env.get("PATH", "")])}
    run_env.pop("PYTHONPATH", None)
    conf = {"stream": STREAM, "mode": "savepoint", "registry_entry": entry}
    run = subprocess.run([str(install.python), "-m", "airflow", "dags", "test", "rewind_upgrade", "-c",
                          json.dumps(conf)], env=run_env, cwd=workdir, capture_output=True, text=True, timeout=1500)
    out = run.stdout + run.stderr
    (workdir / "mwaa-upgrade.log").write_text(out)
    assert run.returncode == 0, out[-6000:]
    return out


@pytest.mark.timeout(1800)
def test_a_stream_moves_onto_yarn_loses_its_drivers_node_mid_batch_and_is_upgraded_there(
        yarn: YarnCluster, yarn_env: dict[str, str], airflow_home: dict[str, str], platform: PlatformInfo,
        new_topic: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Job migration, recovery and an upgrade through YARN, one stream, proven by the data after each leg:

    1. on the embedded default (``local[2]``, a local checkpoint), stopped with a savepoint;
    2. restored onto YARN with an ``s3a://`` checkpoint and launched there by the supervisor DAG (cluster mode:
       the driver in a container); while its driver is mid-batch (the batch written in the sink's open
       transaction, not committed) the NodeManager running it is SIGKILLed with every container it started (a
       node lost, the driver's JVM with it): YARN declares the node lost and ends the application, the
       supervisor relaunches it on the other node;
    3. upgraded on the surviving node (savepoint mode, a column added by the team's own module in the DAGs
       folder) by the ``rewind_upgrade`` DAG run from an Airflow installed the MWAA way (no PySpark in it): the
       pre-flight runs as a job in a YARN container and reports through S3, the new version is launched on
       YARN, watched and proven by its own DQ proof;
    4. run to the end of the topic, stopped with a savepoint (copied inside S3) and proven on every record;
       the savepoint restored onto the embedded default's local checkpoint is whole there. (Launching from a
       restored local checkpoint: tests/test_savepoint_roundtrip.py.)
    """
    topic = new_topic(3, "ymig")
    home, bootstrap = tmp_path / "home", platform.kafka_bootstrap
    entry = dict(max_offsets=400, trigger='"1 second"', sink_url=f"sqlite:///{tmp_path}/sink.db",
                 restart="{strategy: fixed-delay, max_attempts: 6, delay: 5 seconds}")
    local = write_registry(tmp_path / "local.yaml", demo_stream(STREAM, topic, home, **entry))
    on_yarn = write_registry(tmp_path / "yarn.yaml", demo_stream(
        STREAM, topic, home, checkpoint=f"s3a://{platform.bucket}/yarn-{uuid.uuid4().hex[:8]}/{STREAM}", **entry))
    back = write_registry(tmp_path / "back.yaml", demo_stream(
        STREAM, topic, home, checkpoint=str(home / "checkpoints" / f"{STREAM}-back"), transform=NEW_TRANSFORM,
        **entry))
    # the team's next version: its own module in the DAGs folder (a copy of the tests' upgrade variants)
    install = mwaa_install(tmp_path_factory)  # built once for the run (tests/harness/mwaa.py)
    dags = tmp_path / "mwaa-dags"
    shutil.copytree(install.dags, dags)
    shutil.copy(ROOT / "tests" / "harness" / "upgrade_variants.py", dags / f"{NEW_TRANSFORM.split(':')[0]}.py")
    monkeypatch.syspath_prepend(str(dags))  # this process proves the new version (its contract is the module's)
    spec = load_registry(local).get(STREAM)
    stop = threading.Event()
    sent: dict[str, Any] = {}
    producer = threading.Thread(target=lambda: sent.update(produce(bootstrap, ProduceSpec(
        topic=topic, count=1_000_000, rate=60, partitions=3, id_prefix="ym", malformed_every=97, duplicate_every=89),
        should_stop=stop.is_set).summary()), daemon=True)
    producer.start()
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        # 1. the embedded default, then stop-with-savepoint
        from rewind.supervision.process_control import launch_stream, wait_running

        pid = launch_stream(spec, local, bootstrap, tmp_path / "local-1.log")
        wait_running(spec, pid, 240, tmp_path / "local-1.log")
        wait(lambda: (st := read_stream_status(spec)) and (st.last_batch_id or -1) >= 2, 240, "3 batches on local[2]")
        first = rewind_cli("savepoint", "create", STREAM, "--stop", "--no-restart", registry=local)
        local_proof = proven(spec, bootstrap)
        timings["local_leg_s"] = time.monotonic() - t0

        # 2. onto YARN: restore into S3, the supervisor DAG launches it in cluster mode; its node lost mid-batch
        restored = rewind_cli("savepoint", "restore", STREAM, first["savepoint_id"], registry=on_yarn)
        assert restored["path"].startswith(f"s3a://{platform.bucket}/") and ".restored-" in restored["path"]
        yspec = load_registry(on_yarn).get(STREAM)
        marker = tmp_path / "driver-paused.json"
        monkeypatch.setenv("REWIND_FAULTS", arm(Fault("sink.pre_committed", "pause", batch=first["batch_id"] + 3,
                                                      marker=str(marker), seconds=300))["REWIND_FAULTS"])
        from rewind_airflow.dags.factory import build_dags

        monkeypatch.setenv("REWIND_REGISTRY", str(on_yarn))  # the DAG folder's file builds its DAGs from it
        dag = build_dags(str(on_yarn))[f"rewind_{STREAM}_supervisor"]
        lost: dict[str, Any] = {}

        def lose_the_drivers_node_mid_batch() -> None:
            wait(marker.exists, 600, "the driver paused between its sink's pre-commit and commit")
            app = yarn.rest.apps(tag=stream_tag(STREAM))[0]
            jvm = wait(lambda: driver_jvm(yarn, app.app_id), 30, f"the driver JVM of {app.app_id}")
            node = yarn.node_of(str(app.am_host))
            pids = yarn.kill_node(node)
            assert jvm.pid in pids, (jvm, pids)
            lost.update(app=app.app_id, pid=jvm.pid, node=node, batch=json.loads(marker.read_text())["batch"],
                        at=time.monotonic())

        killer = threading.Thread(target=lose_the_drivers_node_mid_batch, daemon=True)
        killer.start()
        run = dag.test(run_conf={"chain": False, "watch_s": 900})
        killer.join(timeout=5)
        assert states(run) == {"reset_if_asked": "success", "launch": "success", "watch": "success",
                               "diagnose": "success", "recover_checkpoint": "success", "relaunch": "success",
                               "prove": "success", "chain_enabled": "success", "next_run": "skipped"}, states(run)
        launched, relaunched = xcom(run, "launch"), xcom(run, "relaunch")
        assert launched["app_id"] == lost["app"] and relaunched["app_id"] != lost["app"], (launched, relaunched)
        assert not pid_alive(lost["pid"]) and yarn.rest.app(lost["app"]).state == "FAILED"
        assert yarn.node_of(str(relaunched["node"])) != lost["node"], (relaunched, lost)
        assert [n.state for n in yarn.rest.nodes() if yarn.node_of(n.node_id) == lost["node"]] == ["LOST"]
        timings["yarn_first_launch_s"] = launched["running_at"] - launched["launched_at"]
        timings["node_lost_to_first_batch_s"] = relaunched["detect_to_first_batch_s"]
        monkeypatch.delenv("REWIND_FAULTS")
        yarn_proof = proven(yspec, bootstrap)

        # 3. an upgrade on the surviving node from the MWAA-style Airflow: the pre-flight in a container beside
        # the live driver, the switch, the proof
        app_before = yarn.rest.apps(tag=stream_tag(STREAM))[0].app_id
        new_entry = on_yarn.read_text().replace(f"transform: {spec.transform}", f"transform: {NEW_TRANSFORM}")
        assert NEW_TRANSFORM in new_entry
        upgraded_at = time.monotonic()
        upgrade_from_mwaa(install, dags, airflow_home, yarn_env, on_yarn, new_entry, tmp_path)
        timings["upgrade_s"] = time.monotonic() - upgraded_at
        yspec = load_registry(on_yarn).get(STREAM)
        assert yspec.transform == NEW_TRANSFORM
        from rewind.runtime.cluster_submit import job_tag
        from rewind.upgrade.history import read_history

        record = read_history(yspec)[-1]
        assert record["result"] == "upgraded", record
        assert [s["step"] for s in record["steps"]][-2:] == ["proving", "proven"], record["steps"]
        assert record["preflight"]["batch_id"] is not None and record["preflight"]["input_rows"] > 0, record
        assert record["savepoint"]["id"] in str(record.get("checkpoint")) and record["checkpoint"].startswith("s3a://")
        preflights = yarn.rest.apps(tag=job_tag(STREAM))  # the pre-flight ran in the cluster and ended there
        assert [a.state for a in preflights] == ["FINISHED"], preflights
        app_after = yarn.rest.apps(tag=stream_tag(STREAM))[0]
        assert app_after.app_id != app_before and app_after.active, (app_before, app_after)
        from rewind.driver.runner import open_sink

        def cents_rows() -> int:
            sink = open_sink(yspec)
            try:
                return int(sink.read_table("events")["amount_cents"].notna().sum())
            finally:
                sink.dispose()

        wait(lambda: cents_rows() > 0, 180, "rows of the new version (amount_cents) in the sink")
        upgrade_proof = proven(yspec, bootstrap)

        # 4. to the end of the topic, a savepoint copied inside S3, every record proven; restorable locally
        stop.set()
        producer.join(timeout=60)
        from rewind.supervision.process_control import wait_caught_up

        wait_caught_up(yspec, bootstrap, 300)
        second = rewind_cli("savepoint", "create", STREAM, "--stop", "--no-restart", registry=on_yarn)
        assert second["batch_id"] > lost["batch"]
        wait(lambda: not yarn.rest.apps(tag=stream_tag(STREAM))[0].active, 60, "its YARN application to end")
        final = proven(yspec, bootstrap, everything=True)
        rewind_cli("savepoint", "restore", STREAM, second["savepoint_id"], registry=back)
        from rewind.checkpoints.inspection import inspect_checkpoint
        from rewind.checkpoints.pointer import active_checkpoint

        bspec = load_registry(back).get(STREAM)
        assert inspect_checkpoint(active_checkpoint(bspec)).committed[-1] == second["batch_id"]
    finally:
        stop.set()
    print(json.dumps({"sent": sent, "local": local_proof["kafka_records"], "yarn": yarn_proof["kafka_records"],
                      "upgraded": upgrade_proof["kafka_records"],
                      "final": {k: final[k] for k in ("kafka_records", "sink_events", "sink_dead_letters",
                                                      "duplicate_event_rows")},
                      "lost": {k: v for k, v in lost.items() if k != "pids"},
                      "timings": {k: round(v, 1) for k, v in timings.items()}}, default=str))


def test_stopping_the_cluster_leaves_no_process(yarn: YarnCluster) -> None:
    """Last in the module: the daemons and every container process (each in a session of its own) end."""
    pids = [p for p in yarn.info().pids.values() if p] + [c.pid for c in yarn.containers()]
    descendants = [c.pid for p in pids if pid_alive(p) for c in psutil.Process(p).children(recursive=True)]
    yarn.stop()
    left = [p for p in set(pids + descendants) if pid_alive(p)]
    assert not left, [psutil.Process(p).cmdline() for p in left]
