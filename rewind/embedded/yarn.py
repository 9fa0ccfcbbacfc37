"""Apache Hadoop YARN on one machine: a ResourceManager and one or two NodeManagers from ``.jars/yarn``.

Why: Spark runs a Python driver *inside* the cluster only on a cluster manager that allows it, and the
standalone one refuses (``tests.harness.spark_cluster``); YARN is what EMR, Dataproc and on-premises
Hadoop run. Started the way Kafka's broker is (``rewind.embedded.kafka_broker``): each daemon is
``java -cp <its conf>:.jars/yarn/* <main class>`` in its own session (the pid held is the JVM), on free
ports, with its own directories and log file, a readiness check (the ResourceManager's REST API answers
and every NodeManager has registered), and the parent-death signal.

Layout of ``workdir``: ``conf/`` (the client's ``HADOOP_CONF_DIR``: spark-submit reads it), ``rm/``
(``conf/``, ``resourcemanager.log``), ``nm-N/`` (``conf/``, ``local/`` the containers' directories,
``logs/`` their stdout and stderr, ``nodemanager.log``), ``staging/`` (Spark's staging directory),
``yarn.json`` (addresses and pids, for ``rewind services``). Settings: ``rewind.embedded.yarn_config``.

Containers are the NodeManager's descendants, each in a session of its own (the container executor
starts them with ``setsid``): stopping a NodeManager's process group would leave them running. So a
stop, and ``kill_node`` (a node lost), collect the node's container processes first and SIGKILL what is
left of them afterwards: no process outlives the cluster.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from rewind.embedded.yarn_config import (
    LOG4J,
    NODE_MANAGER,
    RESOURCE_MANAGER,
    NodeManagerSettings,
    ResourceManagerSettings,
    client_site,
    core_site,
    explain_failure,
    nodemanager_site,
    resourcemanager_site,
    site_xml,
)
from rewind.runtime.jars import java_binary, yarn_classpath
from rewind.runtime.processes import (
    ManagedProcess,
    ServiceError,
    free_port,
    pid_alive,
    port_open,
    terminate_group,
    wait_until,
)
from rewind.runtime.yarn_rm import ResourceManagerClient

log = logging.getLogger(__name__)

#: The daemons' heap: enough for a ResourceManager's web app and a few applications on 2 cores.
DAEMON_HEAP = "256m"
#: Options of every daemon JVM: C1 only and the serial collector (short-lived, 2 cores), and the module
#: openings Hadoop's web apps (Guice, Jersey) need on Java 17.
JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "--add-opens=java.base/java.lang=ALL-UNNAMED",
            "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
            "--add-opens=java.base/java.net=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED")


def java_home() -> str:
    """The JDK the daemons run on; NodeManagers hand it to containers (``$JAVA_HOME/bin/java``)."""
    return str(Path(os.path.realpath(java_binary())).parent.parent)


@dataclass
class YarnInfo:
    """What a running cluster looks like from outside (written to ``yarn.json``)."""

    workdir: str
    conf_dir: str           # HADOOP_CONF_DIR for spark-submit
    rm_address: str         # host:port of yarn.resourcemanager.address
    web_url: str            # the ResourceManager's web app: REST API, proxy, UI
    staging_dir: str        # spark.yarn.stagingDir
    nodes: list[str]        # node ids (host:port)
    pids: dict[str, int]
    logs: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Environment of a process that submits to this cluster."""
        return {"HADOOP_CONF_DIR": self.conf_dir, "YARN_CONF_DIR": self.conf_dir}


@dataclass(frozen=True)
class Container:
    """A process of one YARN container (the JVM or a process it started)."""

    pid: int
    container_id: str
    node: int          # index of the NodeManager
    argv: tuple[str, ...]

    @property
    def app_id(self) -> str:
        """``container_1700000000000_0001_01_000001`` -> ``application_1700000000000_0001``."""
        parts = self.container_id.split("_")
        return "application_" + "_".join(parts[-4:-2]) if len(parts) >= 5 else ""

    @property
    def is_application_master(self) -> bool:
        return self.container_id.endswith("_000001")


class YarnCluster:
    """``with YarnCluster(tmp, nodes=2) as yarn: ...``; ``detach=True`` for ``rewind services up --yarn``."""

    def __init__(self, workdir: Path, nodes: int = 1, node_memory_mb: int = 2048, heap: str = DAEMON_HEAP,
                 node_expiry_ms: int = 10_000, detach: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.heap, self.detach = heap, detach
        self.rm_settings = ResourceManagerSettings(free_port(), free_port(), free_port(), free_port(), free_port(),
                                                   node_expiry_ms=node_expiry_ms, max_allocation_mb=node_memory_mb)
        self.nm_settings = [NodeManagerSettings(i, free_port(), free_port(), free_port(),
                                                str(self.workdir / f"nm-{i}" / "local"),
                                                str(self.workdir / f"nm-{i}" / "logs"), memory_mb=node_memory_mb)
                            for i in range(nodes)]
        self.rm: ManagedProcess | None = None
        self.nms: list[ManagedProcess | None] = [None] * nodes
        self.rest = ResourceManagerClient(self.rm_settings.web_url)
        self.startup_s: float | None = None

    # ------------------------------------------------------------------ configuration on disk
    @property
    def conf_dir(self) -> Path:
        return self.workdir / "conf"

    @property
    def staging_dir(self) -> Path:
        return self.workdir / "staging"

    def _write_conf(self, folder: Path, yarn: dict[str, str]) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "yarn-site.xml").write_text(site_xml(yarn))
        (folder / "core-site.xml").write_text(site_xml(core_site(str(self.workdir / "tmp"))))
        (folder / "log4j.properties").write_text(LOG4J)
        return folder

    def _daemon(self, name: str, conf: Path, main_class: str, log_path: Path) -> ManagedProcess:
        argv = [java_binary(), f"-Xmx{self.heap}", *JVM_OPTS, f"-Dhadoop.home.dir={self.workdir}",
                f"-Dhadoop.log.dir={log_path.parent}", f"-Dyarn.log.dir={log_path.parent}",
                f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
                "-cp", f"{conf}:{yarn_classpath()}", main_class]
        env = {"JAVA_HOME": java_home(), "HADOOP_CONF_DIR": str(conf), "YARN_CONF_DIR": str(conf)}
        return ManagedProcess(name, argv, log_path, env=env, death_signal=None if self.detach else signal.SIGTERM)

    def _check_ports(self, what: str, ports: dict[str, int]) -> None:
        taken = {k: p for k, p in ports.items() if port_open(p)}
        if taken:
            raise ServiceError(f"YARN {what} cannot start: port(s) {', '.join(f'{p} ({k})' for k, p in taken.items())} "
                               "taken by another process (stop it, or let Rewind pick free ports)")

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 120.0) -> "YarnCluster":
        t0 = time.monotonic()
        yarn_classpath()  # a missing jar is named before anything starts
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        self._write_conf(self.conf_dir, client_site(self.rm_settings))
        try:
            self._start_rm(timeout)
            for i in range(len(self.nm_settings)):
                self._launch_nm(i)
            self.wait_nodes(len(self.nm_settings), timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        self.write_info()
        return self

    def _start_rm(self, timeout: float) -> None:
        self._check_ports("ResourceManager", self.rm_settings.ports())
        conf = self._write_conf(self.workdir / "rm" / "conf", resourcemanager_site(self.rm_settings))
        self.rm = self._daemon("yarn-resourcemanager", conf, RESOURCE_MANAGER,
                               self.workdir / "rm" / "resourcemanager.log")
        self.rm.start()
        rm = self.rm
        # STARTED serves REST; ACTIVE (haState, a moment later) is when it accepts applications and nodes
        wait_until(lambda: (info := self.rest.cluster_info()).get("state") == "STARTED"
                   and info.get("haState") == "ACTIVE", timeout,
                   f"YARN ResourceManager (REST API at {self.rm_settings.web_url})", rm.log_path, rm.alive,
                   explain_failure)

    def _launch_nm(self, i: int) -> None:
        nm = self.nm_settings[i]
        self._check_ports(f"NodeManager {i}", nm.ports())
        for d in (nm.local_dir, nm.log_dir):
            Path(d).mkdir(parents=True, exist_ok=True)
        conf = self._write_conf(self.workdir / f"nm-{i}" / "conf", nodemanager_site(self.rm_settings, nm))
        proc = self._daemon(f"yarn-nodemanager-{i}", conf, NODE_MANAGER, self.workdir / f"nm-{i}" / "nodemanager.log")
        proc.start()
        self.nms[i] = proc

    def wait_nodes(self, count: int, timeout: float = 120.0) -> None:
        """Wait until ``count`` NodeManagers are RUNNING at the ResourceManager."""
        rm = self.rm
        assert rm is not None
        live = [p for p in self.nms if p is not None]
        wait_until(lambda: len(self.rest.running_nodes()) >= count, timeout,
                   f"{count} YARN NodeManager(s) registered at {self.rm_settings.web_url}",
                   live[-1].log_path if live else rm.log_path,
                   lambda: rm.alive() and all(p.alive() for p in live), explain_failure)

    def spark_defaults(self, python: str, extra: dict[str, str] | None = None) -> Path:
        """A ``SPARK_CONF_DIR`` for spark-submit to this cluster (``<workdir>/spark-conf/spark-defaults.conf``):
        what a deployment sets once on the machines that submit, sized for 2 cores. Spark's jars are already
        on every node (``local:``: nothing is uploaded per application), the staging directory is this
        cluster's, ``python`` runs drivers and executors, one 1-core executor of 512 MB, and C1 with the
        serial collector in the containers' JVMs (short-lived, 2 cores)."""
        import pyspark

        home = Path(pyspark.__file__).resolve().parent  # pyspark's jars/ and bin/, as a Spark distribution's
        conf = {"spark.yarn.jars": f"local:{home / 'jars'}/*", "spark.yarn.stagingDir": f"file://{self.staging_dir}",
                "spark.pyspark.python": python, "spark.driver.memory": "512m", "spark.executor.memory": "512m",
                "spark.executor.instances": "1", "spark.executor.cores": "1",
                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", **(extra or {})}
        folder = self.workdir / "spark-conf"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
        return folder

    def info(self) -> YarnInfo:
        pids = {"resourcemanager": self.rm.pid or 0} if self.rm else {}
        logs = {"resourcemanager": str(self.rm.log_path)} if self.rm else {}
        for i, p in enumerate(self.nms):
            if p is not None:
                pids[f"nodemanager-{i}"], logs[f"nodemanager-{i}"] = p.pid or 0, str(p.log_path)
        return YarnInfo(str(self.workdir), str(self.conf_dir), self.rm_settings.address, self.rm_settings.web_url,
                        str(self.staging_dir), [n.node_id for n in self.nm_settings], pids, logs)

    def write_info(self) -> None:
        path = self.workdir / "yarn.json"
        path.write_text(json.dumps(asdict(self.info()), indent=2))

    # ------------------------------------------------------------------ containers and faults
    def containers(self, node: int | None = None) -> list[Container]:
        """Every process of every container under the NodeManagers (or node ``node``), found by its working
        directory (``.../appcache/<app>/<container id>``)."""
        found: list[Container] = []
        for i, p in enumerate(self.nms):
            if p is None or (node is not None and i != node) or not p.alive():
                continue
            found += _container_processes(p.pid or 0, i)
        return found

    def node_of(self, node_id: str) -> int:
        """Index of the NodeManager whose node id is ``node_id`` (``host:port`` or a NodeManager's web address;
        the ResourceManager names the host as the node resolves it, ``localhost``: the port decides)."""
        port = int(node_id.rsplit(":", 1)[1])
        return next(i for i, n in enumerate(self.nm_settings) if port in (n.port, n.web_port))

    def kill_node(self, i: int) -> list[int]:
        """A lost node: SIGKILL NodeManager ``i`` and every container process it started, at once. Returns
        the pids killed."""
        proc = self.nms[i]
        if proc is None or proc.pid is None:
            return []
        victims = [proc.pid, *(c.pid for c in _container_processes(proc.pid, i))]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        return victims

    def restart_node(self, i: int, timeout: float = 120.0) -> None:
        """Start NodeManager ``i`` again on its ports and directories (after ``kill_node``)."""
        before = len(self.rest.running_nodes())
        self._launch_nm(i)
        self.wait_nodes(before + 1, timeout)
        self.write_info()

    def stop(self) -> None:
        """NodeManagers (their containers first), then the ResourceManager; nothing is left running."""
        leftovers: list[int] = []
        for i, p in enumerate(self.nms):
            if p is not None and p.alive() and p.pid:
                leftovers += [c.pid for c in _container_processes(p.pid, i)]
        for p in self.nms:
            if p is not None:
                p.stop(grace=10.0)  # the NodeManager stops its containers on SIGTERM
        if self.rm:
            self.rm.stop(grace=10.0)
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "YarnCluster":
        return self.start() if self.rm is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _container_processes(nm_pid: int, node: int) -> list[Container]:
    out: list[Container] = []
    try:
        descendants = psutil.Process(nm_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for proc in descendants:
        try:
            cid = container_id_of(proc.cwd())
            argv = tuple(proc.cmdline())
        except (psutil.Error, OSError):
            continue
        if cid:
            out.append(Container(proc.pid, cid, node, argv))
    return out


def container_id_of(cwd: str) -> str | None:
    """The container id a process's working directory names (``.../appcache/<app>/<container id>``)."""
    name = Path(cwd).name
    return name if name.startswith("container_") else None


def read_yarn(workdir: Path) -> YarnInfo | None:
    """The cluster recorded in ``workdir/yarn.json``, or None."""
    path = Path(workdir) / "yarn.json"
    if not path.exists():
        return None
    return YarnInfo(**json.loads(path.read_text()))


def stop_recorded(workdir: Path) -> list[str]:
    """Stop the daemons recorded in ``yarn.json`` and every container under them (``rewind services down``)."""

    info = read_yarn(workdir)
    if info is None:
        return []
    stopped: list[str] = []
    leftovers: list[int] = []
    for name, pid in info.pids.items():
        if name.startswith("nodemanager-") and pid_alive(pid):
            leftovers += [c.pid for c in _container_processes(pid, int(name.split("-")[1]))]
    for name in sorted(info.pids, key=lambda n: n == "resourcemanager"):  # NodeManagers first
        pid = info.pids[name]
        if pid and pid_alive(pid):
            terminate_group(pid, grace=10.0)
            stopped.append(name)
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (Path(workdir) / "yarn.json").unlink(missing_ok=True)
    return stopped
