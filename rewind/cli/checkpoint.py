"""`rewind checkpoint inspect|repair STREAM|PATH|s3://...|s3a://...`: what a checkpoint holds, and rolling it back."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rewind.cli.common import add_registry, command
from rewind.errors import EXIT_FAILED, EXIT_OK, EXIT_PROOF_VIOLATION


def add_parser(sub: Any) -> None:
    cp = command(sub, "checkpoint", "inspect or repair a Spark checkpoint (stream name, path, s3:// or s3a:// URL)",
                 "inspect: batches, offsets, state and every problem found. repair: roll back to the last complete "
                 "batch, moving later files into <checkpoint>.quarantine/ (never deleting).",
                 codes={EXIT_PROOF_VIOLATION: "inspect found problems (each is named)",
                        3: "refused: not a checkpoint, the stream runs, or no batch is complete (restore a "
                           "savepoint); nothing was moved"})
    cp.add_argument("action", choices=["inspect", "repair"])
    cp.add_argument("target", metavar="STREAM|PATH")
    add_registry(cp)
    cp.add_argument("--json", action="store_true")
    cp.add_argument("--dry-run", action="store_true", help="repair: show what would move, change nothing")
    cp.set_defaults(func=run)


def resolve_target(target: str, registry: str | None) -> tuple[str, Any]:
    """STREAM|PATH -> (checkpoint location, the registry stream that owns it or None)."""
    from rewind.checkpoints.pointer import active_checkpoint
    from rewind.checkpoints.store import is_s3_url
    from rewind.registry import NAME_RE, RegistryError, load_registry

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
    from rewind.checkpoints.inspection import format_report, inspect_checkpoint
    from rewind.checkpoints.repair import format_record, repair_checkpoint, stream_running
    from rewind.checkpoints.store import is_s3_url

    target, spec = resolve_target(args.target, args.registry)
    if args.action == "repair":
        record = repair_checkpoint(target, running=stream_running(spec) if spec else None, dry_run=args.dry_run)
        print(json.dumps(record) if args.json else format_record(record))
        done = record["result"] in ("repaired", "healthy: nothing to repair") or args.dry_run
        return EXIT_OK if done else EXIT_FAILED
    s3 = None
    if is_s3_url(target):
        from rewind.s3 import s3_client

        s3 = s3_client()
    report = inspect_checkpoint(target, s3_client=s3)
    print(json.dumps(report.to_json(), default=str) if args.json else format_report(report))
    return EXIT_PROOF_VIOLATION if report.errors else EXIT_OK
