"""`rewind services up|down|status`: the embedded S3 (SeaweedFS) and Apache Kafka in the background."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rewind.cli.common import command


def add_parser(sub: Any) -> None:
    s = command(sub, "services", "embedded S3 (SeaweedFS) and Apache Kafka (KRaft, one broker) in the background",
                "up: start them (state in $REWIND_HOME/services/services.json, mode 0600); down: stop them; "
                "status: are they alive.", codes={1: "failed, or (status) a service is not running"})
    s.add_argument("action", choices=["up", "down", "status"])
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.platform.processes import pid_alive
    from rewind.platform.services import EmbeddedPlatform, read_platform, stop_recorded
    from rewind.settings import services_dir

    workdir = services_dir()
    if args.action == "up":
        existing = read_platform(workdir)
        if existing and all(pid_alive(p) for p in existing.pids.values()):
            print(f"already running: kafka {existing.kafka_bootstrap}, s3 {existing.s3_endpoint}")
            return 0
        stop_recorded(workdir)
        started = EmbeddedPlatform(workdir, detach=True).start()
        print(json.dumps({"kafka": started.kafka_bootstrap, "s3": started.s3_endpoint, "bucket": started.bucket,
                          "state": str(workdir / "services.json"), "logs": started.logs}, indent=2))
        print("services keep running in the background; stop them with `rewind services down`")
        return 0
    if args.action == "down":
        stopped = stop_recorded(workdir)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    info = read_platform(workdir)
    if info is None:
        print(f"not running (no services.json under {workdir})")
        return 1
    alive = {name: pid_alive(pid) for name, pid in info.pids.items()}
    print(json.dumps({"kafka": info.kafka_bootstrap, "s3": info.s3_endpoint, "alive": alive}, indent=2))
    return 0 if all(alive.values()) else 1
