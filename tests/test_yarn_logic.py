"""Hadoop YARN as a component, without starting it: its configuration (rewind.platform.yarn_config), the
one-line errors of a start that cannot work (a missing jar, a port taken, a ResourceManager that does not
answer), and how the ResourceManager's REST answers and containers' processes are read. The cluster itself
runs in tests/test_yarn.py."""

from __future__ import annotations

import socket
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rewind.platform.jars import JarsMissing
from rewind.platform.processes import ManagedProcess, ServiceError, free_port
from rewind.platform.yarn import Container, YarnCluster, container_id_of
from rewind.platform.yarn_config import explain_failure, nodemanager_site, resourcemanager_site, site_xml
from rewind.platform.yarn_rm import ResourceManagerClient, ResourceManagerUnreachable, YarnApp, stream_tag


def test_every_daemon_has_its_own_ports_and_directories(tmp_path: Path) -> None:
    yarn = YarnCluster(tmp_path, nodes=2)
    ports = list(yarn.rm_settings.ports().values()) + [p for n in yarn.nm_settings for p in n.ports().values()]
    assert len(ports) == len(set(ports)) == 5 + 2 * 3
    dirs = [d for n in yarn.nm_settings for d in (n.local_dir, n.log_dir)]
    assert len(set(dirs)) == 4 and all(d.startswith(str(tmp_path)) for d in dirs)
    for nm in yarn.nm_settings:
        site = nodemanager_site(yarn.rm_settings, nm)
        assert site["yarn.nodemanager.address"] == f"127.0.0.1:{nm.port}"
        assert site["yarn.resourcemanager.resource-tracker.address"] == f"127.0.0.1:{yarn.rm_settings.tracker_port}"
        # a PySpark driver's Python processes live in its container: no memory check may kill it for them
        assert site["yarn.nodemanager.vmem-check-enabled"] == site["yarn.nodemanager.pmem-check-enabled"] == "false"
        assert site["yarn.nodemanager.container-executor.class"].endswith("DefaultContainerExecutor")
        assert int(site["yarn.nodemanager.resource.memory-mb"]) >= 2 * (512 + 384)  # a driver and an executor
    rm = resourcemanager_site(yarn.rm_settings)
    assert rm["yarn.scheduler.minimum-allocation-mb"] == "128"
    assert int(rm["yarn.nm.liveness-monitor.expiry-interval-ms"]) <= 15_000  # a lost node is seen in seconds


def test_site_xml_is_hadoop_configuration() -> None:
    root = ET.fromstring(site_xml({"a.b": "1", "c": "x<y&z"}))
    assert root.tag == "configuration"
    assert {p.findtext("name"): p.findtext("value") for p in root.findall("property")} == {"a.b": "1", "c": "x<y&z"}


@pytest.mark.parametrize("log_text, cause", [
    ("java.net.BindException: Port in use: 127.0.0.1:8088", "port it needs is taken"),
    ("Caused by: java.lang.ClassNotFoundException: org.apache.hadoop.yarn.server.X", "make jars"),
    ("Error: Could not find or load main class org.apache.hadoop.yarn.server.nodemanager.NodeManager", "make jars"),
    ("Most of the disks failed. 1/1 local-dirs usable space is below configured utilization", "disk is full"),
    ("INFO all fine", None),
])
def test_a_failed_start_is_explained(log_text: str, cause: str | None) -> None:
    found = explain_failure(log_text)
    assert (found is None) if cause is None else (cause in (found or "")), found


def test_a_missing_jar_is_named_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWIND_JARS", str(tmp_path / "nojars"))
    yarn = YarnCluster(tmp_path / "y")
    with pytest.raises(JarsMissing) as err:
        yarn.start()
    message = str(err.value)
    assert "\n" not in message and "hadoop-yarn-server-resourcemanager" in message and "make jars" in message
    assert yarn.rm is None


def test_a_taken_port_is_refused_naming_it(tmp_path: Path) -> None:
    yarn = YarnCluster(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", yarn.rm_settings.web_port))
        s.listen()
        with pytest.raises(ServiceError) as err:
            yarn.start()
    first = str(err.value).splitlines()[0]
    assert f"port(s) {yarn.rm_settings.web_port} (webapp) taken" in first
    assert yarn.rm is None  # refused before a JVM started


def test_a_resourcemanager_that_does_not_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ResourceManager process that runs but never serves its REST API: the start fails after its timeout
    naming the REST address and the log; a client of a dead address fails in one line naming it."""
    yarn = YarnCluster(tmp_path)

    def silent(name: str, conf: Path, main_class: str, log_path: Path) -> ManagedProcess:
        return ManagedProcess(name, [sys.executable, "-c", "import time; time.sleep(60)"], log_path)

    monkeypatch.setattr(yarn, "_daemon", silent)
    with pytest.raises(ServiceError) as err:
        yarn.start(timeout=2)
    assert str(err.value).splitlines()[0].startswith(
        f"YARN ResourceManager (REST API at {yarn.rm_settings.web_url}) not ready after 2s")
    assert yarn.rm is not None and not yarn.rm.alive()  # stopped on the way out
    gone = ResourceManagerClient(f"127.0.0.1:{free_port()}", timeout_s=1)
    with pytest.raises(ResourceManagerUnreachable) as unreachable:
        gone.apps()
    assert "\n" not in str(unreachable.value) and gone.web_url in str(unreachable.value)


def test_containers_and_applications_are_read_from_what_yarn_writes() -> None:
    assert container_id_of("/x/nm-0/local/usercache/root/appcache/application_17_0003/container_17_0003_01_000001") \
        == "container_17_0003_01_000001"
    assert container_id_of("/x/nm-0/local") is None
    am = Container(1, "container_1795760668172_0003_01_000001", 0, ())
    assert am.app_id == "application_1795760668172_0003" and am.is_application_master
    assert not Container(2, "container_e05_1795760668172_0003_02_000002", 1, ()).is_application_master
    assert Container(2, "container_e05_1795760668172_0003_02_000002", 1, ()).app_id == "application_1795760668172_0003"
    app = YarnApp.from_rest({"id": "application_1_2", "name": "rewind-demo", "state": "RUNNING",
                             "finalStatus": "UNDEFINED", "trackingUrl": "http://rm:8088/proxy/application_1_2/",
                             "applicationTags": "rewind,rewind-stream-demo", "startedTime": 5,
                             "amHostHttpAddress": "localhost:8042"})
    assert app.active and app.tags == ("rewind", "rewind-stream-demo") and app.am_host == "localhost:8042"
    assert stream_tag("Demo") == "rewind-stream-demo"

