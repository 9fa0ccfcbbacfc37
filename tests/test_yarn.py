"""Rewind on Apache Hadoop YARN: drivers inside the cluster (cluster deploy mode), checkpoints on S3.

One YARN cluster for the module (a ResourceManager and two NodeManagers from .jars/yarn, the second one for
the node that is lost), on the session's platform (Kafka, SeaweedFS). The scenario test moves one stream
from the embedded default (``local[2]``, a local checkpoint) onto YARN and back, and on YARN loses its
driver's container and then a whole node, all under the supervisor DAG; every leg ends with the proof by the
data (every Kafka offset against the sink: 0 duplicates, 0 missing). The last test stops the cluster and
finds no process of it left.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rewind.platform.processes import pid_alive
from rewind.platform.services import PlatformInfo
from rewind.platform.yarn import YarnCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    cluster = YarnCluster(tmp_path_factory.mktemp("yarn"), nodes=2)
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
    assert len(nodes) == 2 and all(n.available_mb + n.used_mb == 2048 for n in nodes), nodes
    assert {yarn.node_of(n.node_id) for n in nodes} == {0, 1}
    for name, log in yarn.info().logs.items():
        assert Path(log).stat().st_size > 0, name
    dirs = {d for n in yarn.nm_settings for d in (n.local_dir, n.log_dir)}
    assert len(dirs) == 4 and all(Path(d).is_dir() for d in dirs)


def test_stopping_the_cluster_leaves_no_process(yarn: YarnCluster) -> None:
    """Last in the module: the daemons and every container process (each in a session of its own) end."""
    pids = [p for p in yarn.info().pids.values() if p] + [c.pid for c in yarn.containers()]
    descendants = [c.pid for p in pids if pid_alive(p) for c in psutil.Process(p).children(recursive=True)]
    yarn.stop()
    left = [p for p in set(pids + descendants) if pid_alive(p)]
    assert not left, [psutil.Process(p).cmdline() for p in left]
