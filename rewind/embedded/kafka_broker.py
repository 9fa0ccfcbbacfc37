"""Apache Kafka as the embedded broker: KRaft nodes started from the jars in ``.jars/kafka``.

One node is broker and controller at once (``process.roles=broker,controller``), as in Kafka's
own quick start; ``KafkaCluster`` starts three of them on localhost, every one a voter, for
failover tests (replication factor 3, ``min.insync.replicas`` 2). Each node gets free ports, its
own directory (``data/`` formatted on first start, ``server.properties``, ``log4j2.xml``,
``broker.log``), a readiness check through the Admin API, and the parent-death signal, so no
broker outlives its owner, also after ``kill -9`` of the owner.

Measured here (2 cores, Kafka 4.1.1, Java 17): storage format 1.7 s, start to a metadata answer
about 3 s; a controlled shutdown on SIGTERM about 1 s.

Sizing for 2 cores and 24 GB: a 1 GB heap per single broker, 512 MB per cluster node
(``REWIND_KAFKA_HEAP`` overrides), two network and four I/O threads, internal topics of 4
partitions instead of 50 (creating the 50-partition ``__consumer_offsets`` took seconds on the
first consumer group).
"""

from __future__ import annotations

import base64
import logging
import re
import signal
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rewind.runtime.jars import broker_classpath, java_binary
from rewind.runtime.processes import ManagedProcess, ServiceError, free_port, port_open, wait_until
from rewind.settings import kafka_heap, kafka_jvm_performance_opts

log = logging.getLogger(__name__)

LOG4J2 = """<Configuration status="WARN">
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="STDOUT"/></Root>
    <Logger name="kafka" level="WARN"/>
    <Logger name="org.apache.kafka" level="WARN"/>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.server.BrokerServer" level="INFO"/>
    <Logger name="kafka.server.ControllerServer" level="INFO"/>
    <Logger name="org.apache.kafka.storage.internals.log.LogLoader" level="INFO"/>
  </Loggers>
</Configuration>
"""


@dataclass(frozen=True)
class NodeSettings:
    """What makes one node's ``server.properties`` (pure data, see ``server_properties``)."""

    node_id: int
    port: int
    controller_port: int
    voters: str                      # "1@127.0.0.1:9093,2@..." (every controller of the cluster)
    data_dir: str
    replication: int = 1             # default.replication.factor and the internal topics'
    sasl_port: int | None = None     # a SASL_PLAINTEXT listener with PLAIN users, when set
    sasl_users: tuple[tuple[str, str], ...] = ()


def server_properties(s: NodeSettings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The broker's configuration: KRaft combined node on 127.0.0.1, sized for a small machine."""
    min_isr = str(min(2, s.replication))
    listeners = [f"PLAINTEXT://127.0.0.1:{s.port}", f"CONTROLLER://127.0.0.1:{s.controller_port}"]
    advertised = [f"PLAINTEXT://127.0.0.1:{s.port}"]
    props = {
        "process.roles": "broker,controller",
        "node.id": str(s.node_id),
        "controller.quorum.voters": s.voters,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "log.dirs": s.data_dir,
        "num.partitions": "1",
        "auto.create.topics.enable": "false",  # a wrong topic name must fail, not create a topic
        "default.replication.factor": str(s.replication),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(s.replication),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(s.replication),
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(s.replication),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "2",
        "log.cleaner.threads": "1",
        "unclean.leader.election.enable": "false",
    }
    if s.sasl_port is not None:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{s.sasl_port}")
        advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{s.sasl_port}")
        users = " ".join(f'user_{u}="{p}"' for u, p in s.sasl_users)
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};")
    props["listeners"] = ",".join(listeners)
    props["advertised.listeners"] = ",".join(advertised)
    props.update(extra or {})
    return props


def explain_failure(log_text: str) -> str | None:
    """The cause of a failed start as a broker log tells it, in words that say what to change."""
    checks = [
        (r"Address already in use|BindException", "a port it needs is taken by another process"),
        (r"Could not reserve enough space|Cannot allocate memory|insufficient memory|OutOfMemoryError",
         "not enough memory for the broker's heap (set REWIND_KAFKA_HEAP lower, e.g. 512m, or free memory)"),
        (r"No meta\.properties|not formatted|has not been formatted",
         "its storage is not formatted (delete the node's data/ folder to format it afresh)"),
        (r"Invalid cluster\.id|INCONSISTENT_CLUSTER_ID|cluster ID .* doesn't match",
         "its data/ folder belongs to another cluster (delete it, or use a fresh directory)"),
        (r"UnsupportedClassVersionError", "the Java on PATH is too old (Kafka 4 needs Java 17)"),
        (r"ClassNotFoundException|NoClassDefFoundError", "broker jars are incomplete: run `make jars`"),
    ]
    for pattern, cause in checks:
        if re.search(pattern, log_text):
            return cause
    return None


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as kafka-storage does)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    lines = [f"{k}={v}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)  # may hold SASL passwords


def default_heap(cluster: bool) -> str:

    return kafka_heap(cluster)


class KafkaBroker:
    """One KRaft node (broker and controller) in ``workdir``; see the module docstring."""

    def __init__(self, workdir: Path, *, node_id: int = 1, port: int | None = None,
                 controller_port: int | None = None, voters: str | None = None, cluster_id: str | None = None,
                 replication: int = 1, heap: str | None = None, detach: bool = False,
                 sasl_users: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id
        self.replication = replication
        self.heap = heap or default_heap(cluster=replication > 1)
        self.detach = detach
        self.sasl_users = dict(sasl_users or {})
        self.sasl_port = free_port() if self.sasl_users else None
        self.extra = dict(extra or {})
        self.process: ManagedProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str | None:
        return f"127.0.0.1:{self.sasl_port}" if self.sasl_port else None

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def settings(self) -> NodeSettings:
        return NodeSettings(self.node_id, self.port, self.controller_port, self.voters, str(self.data_dir),
                            self.replication, self.sasl_port, tuple(sorted(self.sasl_users.items())))

    def _jvm(self, main: str, *args: str, heap: str | None = None) -> list[str]:
        heap = heap or self.heap
        return [java_binary(), f"-Xms{min_heap(heap)}", f"-Xmx{heap}", *kafka_jvm_performance_opts(),
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}", "-cp", broker_classpath(), main, *args]

    def prepare(self) -> None:
        """Write the configuration and format the storage if it is not formatted yet."""
        import subprocess

        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.xml").write_text(LOG4J2)
        props = self.workdir / "server.properties"
        _write_properties(props, server_properties(self.settings(), self.extra))
        if (self.data_dir / "meta.properties").exists():
            return
        self.cluster_id = self.cluster_id or new_cluster_id()
        # --cluster-id=ID, not "-t ID": a base64 id starts with "-" one time in 64, and argparse then
        # takes it for an option ("argument --cluster-id/-t: expected one argument").
        done = subprocess.run(self._jvm("kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}", "-c",
                                        str(props), "--ignore-formatted", heap="256m"),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            out = (done.stdout + done.stderr)[-3000:]
            cause = explain_failure(out)
            raise ServiceError(f"formatting Kafka storage in {self.data_dir} failed"
                               f"{': ' + cause if cause else ''}:\n{out}")

    def launch(self) -> None:
        """Start the JVM without waiting for it (a cluster starts its nodes together)."""
        self.prepare()
        for port in (self.port, self.controller_port, self.sasl_port):
            if port and port_open(port):
                raise ServiceError(f"Kafka node {self.node_id} cannot start: port {port} is taken by another "
                                   "process (stop it, or let Rewind pick free ports)")
        self.process = ManagedProcess(f"kafka-{self.node_id}",
                                      self._jvm("kafka.Kafka", str(self.workdir / "server.properties")),
                                      self.log_path, death_signal=None if self.detach else signal.SIGTERM)
        self.process.start()

    def wait_ready(self, timeout: float = 90.0, brokers: int = 1) -> None:
        assert self.process is not None
        wait_until(lambda: self._metadata_ok(brokers), timeout, f"Kafka broker (node {self.node_id})",
                   self.log_path, self.process.alive, explain_failure)

    def start(self, timeout: float = 90.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def _metadata_ok(self, brokers: int) -> bool:
        from confluent_kafka.admin import AdminClient

        if not port_open(self.port):
            return False
        meta = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
        return self.node_id in meta.brokers and len(meta.brokers) >= brokers

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self, grace: float = 20.0) -> None:
        """Controlled shutdown (SIGTERM), SIGKILL after ``grace``."""
        if self.process:
            self.process.stop(grace=grace)

    def kill(self) -> None:
        """SIGKILL: a crash, for failover tests."""
        if self.process:
            self.process.kill()

    def restart(self, timeout: float = 90.0, brokers: int = 1) -> None:
        """Stop and start on the same ports and data (a broker restart)."""
        self.stop()
        self.launch()
        self.wait_ready(timeout, brokers)


def min_heap(heap: str) -> str:
    """The initial heap: a quarter of the maximum, at least 128m (the JVM grows it when needed)."""
    m = re.fullmatch(r"(\d+)([kmgKMG]?)", heap.strip())
    if not m:
        raise ServiceError(f"REWIND_KAFKA_HEAP={heap!r} is not a JVM heap size (use e.g. 512m or 1g)")
    mb = int(m.group(1)) * {"k": 1 / 1024, "m": 1, "g": 1024, "": 1 / 2 ** 20}[m.group(2).lower()]
    return f"{max(128, int(mb // 4))}m"


class KafkaCluster:
    """``nodes`` KRaft nodes on localhost, each broker and voter; replication factor ``nodes``."""

    def __init__(self, workdir: Path, nodes: int = 3, heap: str | None = None) -> None:
        self.workdir = Path(workdir)
        ports = [(free_port(), free_port()) for _ in range(nodes)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = new_cluster_id()
        self.nodes = [KafkaBroker(self.workdir / f"node{i + 1}", node_id=i + 1, port=p, controller_port=c,
                                  voters=voters, cluster_id=cluster_id, replication=nodes,
                                  heap=heap or default_heap(cluster=True))
                      for i, (p, c) in enumerate(ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = 120.0) -> None:
        try:
            for n in self.nodes:
                n.launch()
            for n in self.nodes:
                n.wait_ready(timeout, brokers=len(self.nodes))
        except BaseException:
            self.stop()
            raise

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading ``topic[partition]`` now."""
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic=topic, timeout=10)
        return int(meta.topics[topic].partitions[partition].leader)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "KafkaCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
