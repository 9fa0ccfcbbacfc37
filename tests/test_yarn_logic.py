"""Hadoop YARN as a component, without starting it: its configuration (rewind.embedded.yarn_config), the
one-line errors of a start that cannot work (a missing jar, a port taken, a ResourceManager that does not
answer), and how the ResourceManager's REST answers and containers' processes are read. The cluster itself
runs in tests/test_yarn.py."""

from __future__ import annotations

import socket
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rewind.embedded.yarn import Container, YarnCluster, container_id_of
from rewind.embedded.yarn_config import explain_failure, nodemanager_site, resourcemanager_site, site_xml
from rewind.runtime.jars import JarsMissing
from rewind.runtime.processes import ManagedProcess, ServiceError, free_port
from rewind.runtime.yarn_rm import ResourceManagerClient, ResourceManagerUnreachable, YarnApp, stream_tag


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



def _app(state: str, final: str = "UNDEFINED", diagnostics: str = "") -> YarnApp:
    return YarnApp("application_1_7", "rewind-demo", state, final, None, diagnostics, ("rewind-stream-demo",))


def test_liveness_combines_the_heartbeat_with_yarns_word() -> None:
    from rewind.supervision.cluster_app import judge

    # a driver SIGKILLed: YARN ended its only attempt while the heartbeat still looks fresh
    dead = judge(_app("FAILED", "FAILED", "Application application_1_7 failed 1 times\nmore"), 3.0, 60.0)
    assert (dead.alive, dead.ended, dead.hung) == (False, True, False)
    assert "FAILED" in dead.detail and "failed 1 times" in dead.detail and "more" not in dead.detail
    # a hung driver: YARN runs it, no heartbeat for long: kill it through YARN first
    hung = judge(_app("RUNNING"), 300.0, 60.0)  # alive: it holds the checkpoint until YARN kills it
    assert (hung.alive, hung.hung) == (True, True) and "kill it through YARN" in hung.detail
    # starting: accepted, waiting for a container, no report yet, or only an earlier driver's
    assert judge(_app("ACCEPTED"), None, 60.0).alive and judge(_app("ACCEPTED"), 900.0, 60.0).alive
    assert judge(_app("RUNNING"), 2.0, 60.0).alive
    assert judge(None, 2.0, 60.0) == judge(None, None, 60.0) and not judge(None, 2.0, 60.0).alive


def test_a_graceful_stop_kills_through_yarn_only_when_the_application_lingers() -> None:
    from rewind.supervision.cluster_app import stop_step

    assert stop_step(_app("RUNNING"), False, 5.0, 60.0) == "wait"  # the batch in flight commits first
    assert stop_step(_app("RUNNING"), False, 61.0, 60.0) == "kill"
    assert stop_step(_app("RUNNING"), True, 61.0, 60.0) == "kill"  # stopped, but its application lingers
    assert stop_step(_app("FINISHED", "SUCCEEDED"), True, 1.0, 60.0) == "done"
    assert stop_step(None, False, 1.0, 60.0) == "done"


def test_a_cluster_submit_ships_the_code_and_keeps_secrets_off_the_command_line(tmp_path: Path) -> None:
    import zipfile

    from rewind.runtime.cluster_submit import job_archive, stream_submit, write_properties

    archive = job_archive("rewind.demo.transform:DemoTransform", tmp_path)
    assert job_archive("rewind.demo.transform:DemoTransform", tmp_path) == archive  # built once per content
    names = zipfile.ZipFile(archive).namelist()
    assert "rewind/demo/transform.py" in names and "rewind/inventory/catalog.csv" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    registry = tmp_path / "streams.yaml"
    registry.write_text("streams: {}\n")
    submit = stream_submit("demo", registry, "broker:9092", archive, driver_env={"REWIND_JARS": "/opt/jars"},
                           secret_env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert submit.conf["spark.yarn.maxAppAttempts"] == "1"  # restarts are Rewind's decision
    assert submit.conf["spark.yarn.submit.waitAppCompletion"] == "false"
    assert "rewind-stream-demo" in submit.conf["spark.yarn.tags"].split(",")
    assert submit.conf["spark.yarn.appMasterEnv.PYTHONPATH"] == "{{PWD}}/rewind_job" == \
        submit.conf["spark.executorEnv.PYTHONPATH"]
    assert submit.archives == f"{archive}#rewind_job" and submit.files == str(registry)
    assert submit.application_args == ["demo", "--registry", "streams.yaml", "--bootstrap", "broker:9092"]
    assert "s3cr3t" not in repr(submit) and "s3cr3t" not in str(submit.conf)
    props = write_properties(tmp_path / "p.conf", submit.secret_conf)
    assert props.stat().st_mode & 0o777 == 0o600
    assert "spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY s3cr3t" in props.read_text()


def test_a_bounded_job_in_the_cluster_waits_takes_its_files_and_reports_to_s3(tmp_path: Path) -> None:
    """A pre-flight submitted in cluster mode: spark-submit waits for its end (its exit is the job's), it is
    tagged apart from the stream (the stream's tag finds the stream's driver), the registry and the new entry
    go with it under their base names, its scratch is its container's and its outcome goes to S3."""
    from types import SimpleNamespace

    from rewind.runtime.cluster_submit import job_archive, job_submit
    from rewind.runtime.yarn_rm import stream_tag
    from rewind.upgrade.preflight_job import job_files
    from rewind.upgrade.rules import UpgradeRefused

    registry = tmp_path / "streams.yaml"
    registry.write_text("streams: {}\n")
    prepared = SimpleNamespace(old=SimpleNamespace(name="demo"),
                               req=SimpleNamespace(entry_text="streams: {demo: {}}\n"))
    scratch = tmp_path / "upgrades" / "demo" / "rec-1" / "preflight"
    job = job_files(prepared, scratch, str(registry), "broker:9092", "bkt", in_cluster=True)
    assert job.outcome == "s3://bkt/rewind/upgrades/demo/rec-1/preflight.json"
    assert job.files == [registry.resolve(), (scratch.parent / "new-entry.yaml").resolve()]
    assert job.args[job.args.index("--registry") + 1] == "streams.yaml"
    assert job.args[job.args.index("--entry-file") + 1] == "new-entry.yaml"
    assert job.args[job.args.index("--scratch") + 1] == "preflight-scratch"
    assert not [a for a in job.args if str(tmp_path) in a]  # no path of this worker reaches the container
    with pytest.raises(UpgradeRefused, match="REWIND_S3_BUCKET"):
        job_files(prepared, scratch, str(registry), "broker:9092", None, in_cluster=True)
    here = job_files(prepared, scratch, str(registry), "broker:9092", "bkt")
    assert here.outcome == str(scratch.parent / "preflight.json") and str(registry.resolve()) in here.args

    archive = job_archive("rewind.demo.transform:DemoTransform", tmp_path / "ship")
    submit = job_submit("demo", "rewind-preflight-demo", job.args, archive, job.files,
                        driver_env={"REWIND_S3_BUCKET": "bkt"}, secret_env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert submit.conf["spark.yarn.submit.waitAppCompletion"] == "true"
    assert submit.conf["spark.yarn.maxAppAttempts"] == "1"
    tags = submit.conf["spark.yarn.tags"].split(",")
    assert "rewind-job-demo" in tags and stream_tag("demo") not in tags
    assert submit.files == ",".join(str(f) for f in job.files) and submit.archives == f"{archive}#rewind_job"
    assert submit.conf["spark.yarn.appMasterEnv.REWIND_S3_BUCKET"] == "bkt"
    assert "s3cr3t" not in str(submit.conf) and submit.secret_conf == {
        "spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY": "s3cr3t"}


def test_a_transform_outside_rewind_is_shipped_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from rewind.runtime.cluster_submit import NotShippable, job_archive

    pkg = tmp_path / "src" / "payments_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "transform.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    names = zipfile.ZipFile(job_archive("payments_pkg.transform:T", tmp_path / "cache")).namelist()
    assert "payments_pkg/transform.py" in names and "rewind/__init__.py" in names
    with pytest.raises(NotShippable, match="not_installed_anywhere"):
        job_archive("not_installed_anywhere.t:T", tmp_path / "cache")
    # a pre-flight ships the running version's code and the new one's (a module of its own, as in a DAGs folder)
    (tmp_path / "src" / "payments_v2.py").write_text("Y = 2\n")
    both = zipfile.ZipFile(job_archive(["payments_pkg.transform:T", "payments_v2:T"], tmp_path / "cache")).namelist()
    assert {"payments_pkg/transform.py", "payments_v2.py", "rewind/__init__.py"} <= set(both)
    assert len(both) == len(set(both))  # rewind once


def test_a_bounded_job_past_its_deadline_is_found_by_its_tag_queued_or_running() -> None:
    """What the deadline of a bounded job kills: its own applications that have not ended (one YARN never
    scheduled, ACCEPTED, included), never the stream's driver nor an application that ended."""
    from rewind.runtime.cluster_submit import job_tag
    from rewind.runtime.yarn_rm import still_running

    def app(app_id: str, state: str, *tags: str) -> YarnApp:
        return YarnApp(app_id, "x", state, "UNDEFINED", None, tags=tuple(tags))

    apps = [app("a1", "ACCEPTED", "rewind", job_tag("demo")), app("a2", "RUNNING", "rewind", job_tag("demo")),
            app("a3", "FINISHED", "rewind", job_tag("demo")), app("a4", "RUNNING", "rewind", stream_tag("demo")),
            app("a5", "RUNNING", "rewind", job_tag("other"))]
    assert still_running(apps, job_tag("demo")) == ["a1", "a2"]
    assert still_running(apps, job_tag("Demo")) == ["a1", "a2"]  # YARN keeps tags in lower case
