"""`rewind` command line: services, produce, stream, verify, up."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

log = logging.getLogger("rewind")


from rewind.settings import resolve_bootstrap, rewind_home, services_dir  # noqa: E402  (used by the commands)


def cmd_services(args: argparse.Namespace) -> int:
    from rewind.platform.services import EmbeddedPlatform, read_platform, stop_recorded
    from rewind.platform.processes import pid_alive

    workdir = services_dir()
    if args.action == "up":
        existing = read_platform(workdir)
        if existing and all(pid_alive(p) for p in existing.pids.values()):
            print(f"already running: kafka {existing.kafka_bootstrap}, s3 {existing.s3_endpoint}")
            return 0
        stop_recorded(workdir)
        info = EmbeddedPlatform(workdir, detach=True).start()
        print(json.dumps({"kafka": info.kafka_bootstrap, "s3": info.s3_endpoint, "bucket": info.bucket,
                          "state": str(workdir / "services.json"), "logs": info.logs}, indent=2))
        print("services keep running in the background; stop them with `rewind services down`")
        return 0
    if args.action == "down":
        stopped = stop_recorded(workdir)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    info = read_platform(workdir)
    if info is None:
        print("not running (no services.json under %s)" % workdir)
        return 1
    alive = {name: pid_alive(pid) for name, pid in info.pids.items()}
    print(json.dumps({"kafka": info.kafka_bootstrap, "s3": info.s3_endpoint, "alive": alive}, indent=2))
    return 0 if all(alive.values()) else 1


def cmd_produce(args: argparse.Namespace) -> int:
    from rewind.demo.producer import ProduceSpec, produce

    spec = ProduceSpec(topic=args.topic, count=args.count, rate=args.rate, partitions=args.partitions,
                       id_prefix=args.id_prefix, start_seq=args.start_seq, keys=args.keys,
                       malformed_every=args.malformed_every, late_every=args.late_every,
                       late_by=timedelta(seconds=args.late_by), duplicate_every=args.duplicate_every,
                       transactional=args.transactional, keyless=args.keyless)
    try:
        spec.validate()
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    report = produce(resolve_bootstrap(args.bootstrap), spec,
                     progress=lambda r: print(f"  sent {r.sent} ({r.sent / max(r.seconds, 1e-9):.0f}/s)",
                                              file=sys.stderr, flush=True))
    print(json.dumps(report.summary()))
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry
    from rewind.stream.runner import run_stream

    spec = load_registry(args.registry).get(args.stream)
    return run_stream(spec, resolve_bootstrap(args.bootstrap), available_now=args.available_now)


def cmd_verify(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry
    from rewind.proof.verify import verify_stream

    from rewind.platform.processes import pid_alive
    from rewind.stream.status import read_status, status_path
    from rewind.proof.verify import committed_bounds

    spec = load_registry(args.registry).get(args.stream)
    status = read_status(status_path(spec.status_dir, spec.name))
    bounds = None
    if not args.all and status and status.state in ("starting", "running", "stopping") and pid_alive(status.pid):
        bounds = committed_bounds(status.end_offsets)
        print(f"{spec.name} is running: proving the records below its last committed batch's offsets "
              f"{status.end_offsets} (use --all once it has stopped)", file=sys.stderr)
    report = verify_stream(spec, resolve_bootstrap(args.bootstrap), bounds)
    print(json.dumps(report.summary(), indent=None if args.json else 1, default=str))
    return 0 if report.ok else 2


def active_checkpoint_of(spec) -> str:  # type: ignore[no-untyped-def]
    """Where the stream's checkpoint is now (a restore may have pointed it elsewhere)."""
    from rewind.checkpoints.pointer import active_checkpoint

    return active_checkpoint(spec)


def resolve_checkpoint_target(target: str, registry: str | None):  # type: ignore[no-untyped-def]
    """STREAM|PATH -> (checkpoint location, the registry stream that owns it or None)."""
    from rewind.registry import NAME_RE, RegistryError, load_registry

    if NAME_RE.match(target) and not Path(target).exists():
        spec = load_registry(registry).get(target)
        return active_checkpoint_of(spec), spec
    if target.startswith("s3://"):
        return target, None
    try:
        streams = load_registry(registry).streams.values()
    except (RegistryError, OSError):
        return target, None
    here = Path(target).resolve()
    return target, next((s for s in streams if Path(active_checkpoint_of(s)).resolve() == here), None)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from rewind.checkpoints.inspection import NotACheckpoint, format_report, inspect_checkpoint
    from rewind.checkpoints.repair import RepairRefused, format_record, repair_checkpoint, stream_running

    target, spec = resolve_checkpoint_target(args.target, args.registry)
    try:
        if args.action == "repair":
            record = repair_checkpoint(target, running=stream_running(spec) if spec else None, dry_run=args.dry_run)
            print(json.dumps(record) if args.json else format_record(record))
            return 0 if record["result"] in ("repaired", "healthy: nothing to repair") or args.dry_run else 1
        s3 = None
        if target.startswith("s3://"):
            from rewind.s3 import s3_client

            s3 = s3_client()
        report = inspect_checkpoint(target, s3_client=s3)
    except NotACheckpoint as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RepairRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(report.to_json(), default=str) if args.json else format_report(report))
    return 1 if report.errors else 0


def cmd_up(args: argparse.Namespace) -> int:
    from rewind.platform.up import run_up

    return run_up(rewind_home(), args.registry, args.stream, rate=args.rate)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rewind", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("services", help="embedded S3 (SeaweedFS) and Apache Kafka (KRaft, one broker)")
    s.add_argument("action", choices=["up", "down", "status"])
    s.set_defaults(func=cmd_services)

    pr = sub.add_parser("produce", help="send demo events (deterministic ids) with optional faults")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--count", type=int, required=True, help="sequence numbers to send (duplicates come on top)")
    pr.add_argument("--rate", type=float, default=0.0, help="events/s; 0 = as fast as possible")
    pr.add_argument("--partitions", type=int, default=3, help="partitions when the topic is created")
    pr.add_argument("--id-prefix", default="evt")
    pr.add_argument("--start-seq", type=int, default=0)
    pr.add_argument("--keys", type=int, default=16)
    pr.add_argument("--malformed-every", type=int, default=0, metavar="N", help="one malformed record in N")
    pr.add_argument("--late-every", type=int, default=0, metavar="N", help="one late record (old event time) in N")
    pr.add_argument("--late-by", type=float, default=3600.0, metavar="SECONDS")
    pr.add_argument("--duplicate-every", type=int, default=0, metavar="N", help="send one event in N twice")
    pr.add_argument("--transactional", action="store_true", help="send in Kafka transactions (offset gaps)")
    pr.add_argument("--keyless", action="store_true",
                    help="send without keys: the client's default sticky partitioner picks partitions (bursts)")
    pr.add_argument("--bootstrap")
    pr.set_defaults(func=cmd_produce)

    st = sub.add_parser("stream", help="run a registered stream in the foreground")
    st.add_argument("action", choices=["run"])
    st.add_argument("stream")
    st.add_argument("--registry")
    st.add_argument("--bootstrap")
    st.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    st.set_defaults(func=cmd_stream)

    v = sub.add_parser("verify", help="prove exactly-once: every Kafka record against the sink")
    v.add_argument("stream")
    v.add_argument("--registry")
    v.add_argument("--bootstrap")
    v.add_argument("--json", action="store_true")
    v.add_argument("--all", action="store_true", help="every record in the topics, even while the stream runs")
    v.set_defaults(func=cmd_verify)

    cp = sub.add_parser("checkpoint", help="inspect or repair a Spark checkpoint (stream name, path, s3:// URL)",
                        description="inspect: report batches, offsets, state and problems (exit 1 on errors). "
                        "repair: roll back to the last complete batch, moving later files into "
                        "<checkpoint>.quarantine/ (exit 3 when refused: stream running or nothing complete)")
    cp.add_argument("action", choices=["inspect", "repair"])
    cp.add_argument("target", metavar="STREAM|PATH")
    cp.add_argument("--registry")
    cp.add_argument("--json", action="store_true")
    cp.add_argument("--dry-run", action="store_true", help="repair: show what would move, change nothing")
    cp.set_defaults(func=cmd_checkpoint)

    from rewind.cli.savepoint import add_savepoint_parser

    add_savepoint_parser(sub)

    from rewind.cli.dq import add_dq_parser

    add_dq_parser(sub)
    from rewind.cli.supervisor import add_supervisor_parser

    add_supervisor_parser(sub)
    from rewind.cli.replay import add_replay_parser
    add_replay_parser(sub)
    from rewind.cli.chaos import add_chaos_parser
    add_chaos_parser(sub)

    up = sub.add_parser("up", help="start the embedded platform, the demo producer and stream; Ctrl-C stops all")
    up.add_argument("--registry")
    up.add_argument("--stream", default="demo")
    up.add_argument("--rate", type=float, default=200.0, help="demo producer events/s")
    up.set_defaults(func=cmd_up)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "boto3", "urllib3", "py4j", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from confluent_kafka import KafkaException

    from rewind.platform.airflow_local import AirflowError
    from rewind.kafka.client import KafkaTimeoutError, KafkaUnreachable
    from rewind.kafka.client_config import KafkaClientConfigError
    from rewind.kafka.offsets import DataLossError, UnknownTopicError
    from rewind.platform.processes import ServiceError
    from rewind.registry import RegistryError

    try:
        return int(args.func(args) or 0)
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (AirflowError, ServiceError, KafkaUnreachable, KafkaTimeoutError, UnknownTopicError, DataLossError,
            KafkaClientConfigError, KafkaException) as exc:
        # A tool that talks to Kafka answers in one line why it could not; --verbose adds the trace.
        if args.verbose:
            log.exception("%s failed", args.command)
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
