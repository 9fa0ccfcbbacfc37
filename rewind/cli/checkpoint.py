"""`rewind checkpoint inspect|repair STREAM|PATH|s3://...|s3a://...`: what a checkpoint holds, and rolling it back.
`rewind checkpoint repartition STREAM --partitions N`: rescale its state (``rewind.upgrade.repartition``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rewind.cli.common import add_registry, command
from rewind.errors import EXIT_FAILED, EXIT_OK, EXIT_PROOF_VIOLATION


def add_parser(sub: Any) -> None:
    cp = command(sub, "checkpoint", "inspect, repair or repartition a Spark checkpoint (stream name, path, s3:// or "
                                    "s3a:// URL)",
                 "inspect: batches, offsets, state and every problem found. repair: roll back to the last complete "
                 "batch, moving later files into <checkpoint>.quarantine/ (never deleting). repartition STREAM "
                 "--partitions N: rescale the stream's state with Spark's offline repartition, on a verified copy of "
                 "a savepoint taken at the stop; the copy is inspected, then the stream switched to it and relaunched "
                 "(the old checkpoint is kept; back to it if the stream commits no batch within its startup grace).",
                 codes={EXIT_FAILED: "repair did not complete, or the repartition broke (the message says where the "
                                     "stream was left)",
                        EXIT_PROOF_VIOLATION: "inspect found problems (each is named)",
                        3: "refused: not a checkpoint, the stream runs (repair), no batch is complete (restore a "
                           "savepoint), or Spark cannot repartition it (HDFS state store, a checkpoint of Spark < 4.0, "
                           "no state, the same partitions); nothing was moved"})
    cp.add_argument("action", choices=["inspect", "repair", "repartition"])
    cp.add_argument("target", metavar="STREAM|PATH")
    add_registry(cp)
    cp.add_argument("--json", action="store_true")
    cp.add_argument("--dry-run", action="store_true", help="repair: show what would move, change nothing")
    cp.add_argument("--partitions", type=int, metavar="N", help="repartition: the state partitions wanted")
    cp.add_argument("--no-restart", action="store_true", help="repartition: leave the stream stopped afterwards")
    cp.add_argument("--bucket", help="repartition: S3 bucket of the savepoints (default: $REWIND_S3_BUCKET)")
    cp.add_argument("--bootstrap", metavar="HOST:PORT", help="repartition: Kafka for the relaunched stream")
    cp.set_defaults(func=run)


def resolve_target(target: str, registry: str | None) -> tuple[str, Any]:
    """STREAM|PATH -> (checkpoint location, the registry stream that owns it or None)."""
    from rewind.checkpoints.pointer import active_checkpoint  # lazy: start-up of the CLI
    from rewind.registry import NAME_RE, RegistryError, load_registry  # lazy: start-up of the CLI
    from rewind.storage import is_s3_url  # lazy: start-up of the CLI

    if NAME_RE.match(target) and not Path(target).exists():
        spec = load_registry(registry).get(target)
        return active_checkpoint(spec), spec
    try:
        streams = load_registry(registry).streams.values()
    except (RegistryError, OSError):
        return target, None
    if is_s3_url(target):  # the stream whose checkpoint it is, so that repair refuses while it runs
        url = target.split("://", 1)[1].rstrip("/")
        in_s3 = [s for s in streams if is_s3_url(s.checkpoint)]
        return target, next((s for s in in_s3 if active_checkpoint(s).split("://", 1)[1].rstrip("/") == url), None)
    here = Path(target).resolve()
    local = [s for s in streams if "://" not in s.checkpoint]
    return target, next((s for s in local if Path(active_checkpoint(s)).resolve() == here), None)


def run(args: argparse.Namespace) -> int:
    from rewind.checkpoints.inspection import format_report, inspect_checkpoint  # lazy: start-up of the CLI
    from rewind.checkpoints.repair import format_record, repair_checkpoint  # lazy: start-up of the CLI
    from rewind.supervision.observe import running_reason  # lazy: start-up of the CLI

    if args.action == "repartition":
        return repartition(args)
    target, spec = resolve_target(args.target, args.registry)
    if args.action == "repair":
        record = repair_checkpoint(target, running=running_reason(spec) if spec else None, dry_run=args.dry_run)
        print(json.dumps(record) if args.json else format_record(record))
        done = record["result"] in ("repaired", "healthy: nothing to repair") or args.dry_run
        return EXIT_OK if done else EXIT_FAILED
    report = inspect_checkpoint(target)
    print(json.dumps(report.to_json(), default=str) if args.json else format_report(report))
    return EXIT_PROOF_VIOLATION if report.errors else EXIT_OK


def repartition(args: argparse.Namespace) -> int:
    import sys

    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.settings import default_registry, resolve_bootstrap  # lazy: start-up of the CLI
    from rewind.storage import S3Storage, resolve_s3_config  # lazy: start-up of the CLI
    from rewind.supervision.process_control import (  # lazy: start-up of the CLI
        default_log_path,
        launch_stream,
        wait_running,
    )
    from rewind.upgrade.repartition import RepartitionRefused, repartition  # lazy: start-up of the CLI

    if args.partitions is None:
        raise RepartitionRefused("repartition needs --partitions N (the state partitions wanted); nothing was done")
    spec = load_registry(args.registry).get(args.target)
    registry = str(args.registry or default_registry())
    store = S3Storage(resolve_s3_config(args.bucket))
    start = None
    if not args.no_restart:
        bootstrap = resolve_bootstrap(args.bootstrap)

        def start(s: Any) -> int:
            log_path = default_log_path(s)
            return wait_running(s, launch_stream(s, registry, bootstrap, log_path), 240.0, log_path).pid

    record = repartition(spec, store, args.partitions, start,
                         on_step=lambda step, detail: print(f"{step}: {detail}", file=sys.stderr, flush=True))
    print(json.dumps(record, default=str) if args.json else
          f"{spec.name}: {record['result']} {record['from']['partitions']} -> {args.partitions} state partitions "
          f"({record.get('reason', '')}); the previous checkpoint {record['from']['checkpoint']} is kept")
    return EXIT_OK if record["result"] == "repartitioned" else EXIT_FAILED
