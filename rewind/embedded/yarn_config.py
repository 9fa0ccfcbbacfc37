"""Apache Hadoop YARN's configuration for one machine: what the ResourceManager, each NodeManager and a
client (spark-submit) read, as plain data (``rewind.embedded.yarn`` starts the processes).

Why each setting that differs from YARN's defaults:

- every address on 127.0.0.1 and a free port: YARN's defaults are fixed ports (8032, 8088, 8040, 8042...)
  on 0.0.0.0, which two NodeManagers on one host, two test workers or another Hadoop would fight over;
- containers as small as Spark's: ``yarn.scheduler.minimum-allocation-mb`` is 1024 by default, which
  rounds a 512 MB driver + 384 MB overhead up to 1 GB; 128 here. A NodeManager offers 2,048 MB and 2
  vcores: one ApplicationMaster (the driver) and one executor fit on either node, so the survivor of a
  lost node can host an application alone (the machine has 2 cores and 24 GB: memory is not what binds);
- no memory checks of containers (``vmem``/``pmem``): a PySpark driver's Python process and its workers
  are in the container's process tree and would get it killed for using more than the JVM's heap;
- the disk health check tolerates a nearly full disk: past 90 % (the default) a NodeManager marks all
  its disks bad and takes no container, a failure that looks like a hang;
- a lost NodeManager is declared lost after ``node_expiry_ms`` (10 s, default 10 minutes): until then the
  ResourceManager may place a relaunched application on the dead node;
- ``DefaultContainerExecutor`` named explicitly: containers run as the NodeManager's user (root on these
  machines; the LinuxContainerExecutor refuses root and needs a setuid binary), and
  ``yarn.nodemanager.delete.debug-delay-sec`` keeps a finished container's directory for an hour, so a
  test (or an operator) can read what ran;
- logs stay on the node (no log aggregation: there is no HDFS), under each NodeManager's ``logs/``;
- the FIFO scheduler: the capacity scheduler needs its own XML of queues for nothing a test uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from xml.sax.saxutils import escape

HOST = "127.0.0.1"
RESOURCE_MANAGER = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODE_MANAGER = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
FIFO = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler"
DEFAULT_EXECUTOR = "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor"


@dataclass(frozen=True)
class ResourceManagerSettings:
    """The ResourceManager's ports and limits."""

    port: int            # yarn.resourcemanager.address: clients submit here
    scheduler_port: int  # ApplicationMasters ask for containers here
    tracker_port: int    # NodeManagers register and heartbeat here
    admin_port: int
    web_port: int        # the web UI, the REST API and the application proxy (tracking URLs)
    node_expiry_ms: int = 10_000
    max_allocation_mb: int = 2048

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://{HOST}:{self.web_port}"

    def ports(self) -> dict[str, int]:
        return {"address": self.port, "scheduler": self.scheduler_port, "resource-tracker": self.tracker_port,
                "admin": self.admin_port, "webapp": self.web_port}


@dataclass(frozen=True)
class NodeManagerSettings:
    """One NodeManager: its ports, its directories, what it offers."""

    index: int
    port: int            # containers are started through this (the node id is host:port)
    localizer_port: int
    web_port: int
    local_dir: str       # containers' working directories, localized files
    log_dir: str         # containers' stdout/stderr (kept: no log aggregation)
    memory_mb: int = 2048
    vcores: int = 2

    @property
    def node_id(self) -> str:
        return f"{HOST}:{self.port}"

    def ports(self) -> dict[str, int]:
        return {"address": self.port, "localizer": self.localizer_port, "webapp": self.web_port}


def client_site(rm: ResourceManagerSettings) -> dict[str, str]:
    """What a client needs to find the ResourceManager (the ``yarn-site.xml`` of ``HADOOP_CONF_DIR`` for
    spark-submit; Spark copies it to the ApplicationMaster, which asks the scheduler address for executors)."""
    return {
        "yarn.resourcemanager.hostname": HOST,
        "yarn.resourcemanager.address": rm.address,
        "yarn.resourcemanager.scheduler.address": f"{HOST}:{rm.scheduler_port}",
        "yarn.resourcemanager.resource-tracker.address": f"{HOST}:{rm.tracker_port}",
        "yarn.resourcemanager.admin.address": f"{HOST}:{rm.admin_port}",
        "yarn.resourcemanager.webapp.address": f"{HOST}:{rm.web_port}",
    }


def resourcemanager_site(rm: ResourceManagerSettings) -> dict[str, str]:
    return {
        **client_site(rm),
        "yarn.resourcemanager.scheduler.class": FIFO,
        "yarn.scheduler.minimum-allocation-mb": "128",
        "yarn.scheduler.maximum-allocation-mb": str(rm.max_allocation_mb),
        "yarn.scheduler.minimum-allocation-vcores": "1",
        "yarn.scheduler.maximum-allocation-vcores": "2",
        "yarn.nm.liveness-monitor.expiry-interval-ms": str(rm.node_expiry_ms),
        "yarn.resourcemanager.recovery.enabled": "false",
        "yarn.resourcemanager.max-completed-applications": "100",
        "yarn.timeline-service.enabled": "false",
    }


def nodemanager_site(rm: ResourceManagerSettings, nm: NodeManagerSettings) -> dict[str, str]:
    return {
        **client_site(rm),
        "yarn.nodemanager.hostname": HOST,
        "yarn.nodemanager.address": nm.node_id,
        "yarn.nodemanager.localizer.address": f"{HOST}:{nm.localizer_port}",
        "yarn.nodemanager.webapp.address": f"{HOST}:{nm.web_port}",
        "yarn.nodemanager.local-dirs": nm.local_dir,
        "yarn.nodemanager.log-dirs": nm.log_dir,
        "yarn.nodemanager.resource.memory-mb": str(nm.memory_mb),
        "yarn.nodemanager.resource.cpu-vcores": str(nm.vcores),
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.pmem-check-enabled": "false",
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
        "yarn.nodemanager.container-executor.class": DEFAULT_EXECUTOR,
        "yarn.nodemanager.delete.debug-delay-sec": "3600",
        "yarn.nodemanager.recovery.enabled": "false",
        "yarn.log-aggregation-enable": "false",
        "yarn.nodemanager.aux-services": "",
        "yarn.timeline-service.enabled": "false",
    }


def core_site(tmp_dir: str) -> dict[str, str]:
    """Hadoop's common settings: its scratch directory, and the local file system as the default one
    (there is no HDFS: Spark stages an application's files under ``spark.yarn.stagingDir`` on it)."""
    return {"hadoop.tmp.dir": tmp_dir, "fs.defaultFS": "file:///", "hadoop.security.authentication": "simple"}


def site_xml(props: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` document."""
    body = "".join(f"  <property><name>{escape(k)}</name><value>{escape(str(v))}</value></property>\n"
                   for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def webapp_address_of(conf_dir: str | None) -> str | None:
    """``host:port`` of the ResourceManager's web app as ``<conf_dir>/yarn-site.xml`` names it (its
    ``yarn.resourcemanager.webapp.address``, else ``yarn.resourcemanager.hostname`` and port 8088); None
    without one."""
    import xml.etree.ElementTree as ET
    from pathlib import Path

    site = Path(conf_dir or "/nonexistent") / "yarn-site.xml"
    if not site.is_file():
        return None
    props = {p.findtext("name"): p.findtext("value") for p in ET.parse(site).getroot().findall("property")}
    return props.get("yarn.resourcemanager.webapp.address") or (
        f"{props['yarn.resourcemanager.hostname']}:8088" if props.get("yarn.resourcemanager.hostname") else None)


#: Hadoop logs through reload4j (log4j 1.2's API): INFO to the process's log file, without the chatter.
LOG4J = """log4j.rootLogger=INFO, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.out
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAuditLogger=WARN
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.NMAuditLogger=WARN
log4j.logger.org.apache.hadoop.ipc=WARN
log4j.logger.org.eclipse.jetty=WARN
log4j.logger.com.sun.jersey=WARN
log4j.logger.org.glassfish=WARN
"""


def explain_failure(log_text: str) -> str | None:
    """The cause of a failed start as a ResourceManager's or NodeManager's log tells it, in words that say
    what to change."""
    checks = [
        (r"BindException|Address already in use|Port in use", "a port it needs is taken by another process"),
        (r"ClassNotFoundException|NoClassDefFoundError|Could not find or load main class",
         "Hadoop YARN's jars are incomplete: run `make jars`"),
        (r"Could not reserve enough space|Cannot allocate memory|OutOfMemoryError",
         "not enough memory for its heap"),
        (r"UnsupportedClassVersionError", "the Java on PATH is too old (Hadoop 3.5 needs Java 17)"),
        (r"Connection refused.*(8031|resource-tracker)|Retrying connect to server",
         "the NodeManager cannot reach the ResourceManager's resource tracker"),
        (r"Most of the disks failed|local-dirs.*(are bad|turned bad)",
         "its local or log directories are not writable, or the disk is full"),
    ]
    for pattern, cause in checks:
        if re.search(pattern, log_text):
            return cause
    return None
