"""`rewind services up|down|status [--yarn]`: the embedded S3 (SeaweedFS) and Apache Kafka in the background,
and with ``--yarn`` an Apache Hadoop YARN cluster (a ResourceManager and NodeManagers) beside them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rewind.cli.common import command


def add_parser(sub: Any) -> None:
    s = command(sub, "services", "embedded S3 (SeaweedFS) and Apache Kafka (KRaft, one broker) in the background; "
                                 "with --yarn, Hadoop YARN too",
                "up: start them (state in $REWIND_HOME/services/services.json, mode 0600); down: stop them (and "
                "YARN, with every container it runs); status: are they alive. --yarn: a YARN ResourceManager and "
                "NodeManagers from .jars/yarn (state in $REWIND_HOME/services/yarn/yarn.json): spark-submit reaches "
                "it with HADOOP_CONF_DIR=<that folder>/conf, the Spark connection with master `yarn`.",
                codes={1: "failed, or (status) a service is not running"})
    s.add_argument("action", choices=["up", "down", "status"])
    s.add_argument("--yarn", action="store_true", help="up: start a YARN cluster as well")
    s.add_argument("--yarn-nodes", type=int, default=1, metavar="N", help="up --yarn: NodeManagers (default 1)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.embedded.services import EmbeddedPlatform, read_platform, stop_recorded  # lazy: start-up of the CLI
    from rewind.embedded.yarn import read_yarn  # lazy: start-up of the CLI
    from rewind.embedded.yarn import stop_recorded as stop_yarn  # lazy: start-up of the CLI
    from rewind.runtime.processes import pid_alive  # lazy: start-up of the CLI
    from rewind.settings import services_dir  # lazy: start-up of the CLI

    workdir = services_dir()
    yarn_dir = workdir / "yarn"
    if args.action == "up":
        existing = read_platform(workdir)
        if existing and all(pid_alive(p) for p in existing.pids.values()):
            print(f"already running: kafka {existing.kafka_bootstrap}, s3 {existing.s3_endpoint}")
        else:
            stop_recorded(workdir)
            started = EmbeddedPlatform(workdir, detach=True).start()
            print(json.dumps({"kafka": started.kafka_bootstrap, "s3": started.s3_endpoint, "bucket": started.bucket,
                              "state": str(workdir / "services.json"), "logs": started.logs}, indent=2))
        if args.yarn:
            print(json.dumps(_yarn_up(yarn_dir, args.yarn_nodes), indent=2))
        print("services keep running in the background; stop them with `rewind services down`")
        return 0
    if args.action == "down":
        stopped = stop_yarn(yarn_dir) + stop_recorded(workdir)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    info = read_platform(workdir)
    if info is None:
        print(f"not running (no services.json under {workdir})")
        return 1
    alive = {name: pid_alive(pid) for name, pid in info.pids.items()}
    out: dict[str, Any] = {"kafka": info.kafka_bootstrap, "s3": info.s3_endpoint, "alive": alive}
    yarn = read_yarn(yarn_dir)
    if yarn is not None:
        out["yarn"] = {"resourcemanager": yarn.web_url, "HADOOP_CONF_DIR": yarn.conf_dir,
                       "alive": {name: pid_alive(pid) for name, pid in yarn.pids.items()}}
        alive.update(out["yarn"]["alive"])
    print(json.dumps(out, indent=2))
    return 0 if all(alive.values()) else 1


def _yarn_up(yarn_dir: Any, nodes: int) -> dict[str, Any]:
    """Start YARN in the background unless a recorded one answers; what a submitter needs to reach it."""
    from rewind.embedded.yarn import YarnCluster, read_yarn  # lazy: start-up of the CLI
    from rewind.embedded.yarn import stop_recorded as stop_yarn  # lazy: start-up of the CLI
    from rewind.runtime.processes import pid_alive  # lazy: start-up of the CLI

    existing = read_yarn(yarn_dir)
    if existing is None or not all(pid_alive(p) for p in existing.pids.values()):
        stop_yarn(yarn_dir)
        existing = YarnCluster(yarn_dir, nodes=nodes, detach=True).start().info()
    return {"yarn": {"resourcemanager": existing.web_url, "address": existing.rm_address,
                     "HADOOP_CONF_DIR": existing.conf_dir, "nodes": existing.nodes, "logs": existing.logs,
                     "spark_connection": {"conn_type": "spark", "host": "yarn", "extra": {
                         "deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": existing.web_url}}}}
