"""`rewind savepoint create|list|show|prune|restore`: the command line of rewind/checkpoints/savepoints.py.

Exit codes: 0 done, 1 failed but worth retrying (S3 unreachable, a stream that would
not stop, a damaged savepoint), 3 refused (bad input, unknown savepoint, stream running):
``rewind.errors`` decides, ``rewind.cli.main`` maps.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from typing import Any

from rewind.cli.common import command


def add_parser(subparsers: Any) -> None:
    sp = command(subparsers, "savepoint", "consistent checkpoint copies in S3: create, list, show, prune, restore")
    actions = sp.add_subparsers(dest="savepoint_action", required=True)

    def action(name: str, help_text: str, with_id: bool = False) -> argparse.ArgumentParser:
        a = command(actions, name, help_text)
        a.add_argument("stream")
        if with_id:
            a.add_argument("savepoint_id", metavar="ID")
        a.add_argument("--registry")
        a.add_argument("--bucket", help="S3 bucket (default: $REWIND_S3_BUCKET, else the embedded platform's)")
        a.set_defaults(func=cmd_savepoint)
        return a

    c = action("create", "copy the last complete batch to s3://BUCKET/savepoints/STREAM/ID/")
    c.add_argument("--stop", action="store_true", help="stop the stream after its current batch, copy, restart it")
    c.add_argument("--no-restart", action="store_true", help="with --stop: leave the stream stopped")
    c.add_argument("--stop-timeout", type=float, default=120.0, metavar="SECONDS")
    c.add_argument("--bootstrap", help="Kafka for the restarted stream (default: as `rewind stream run`)")
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")
    ls = action("list", "savepoints with a manifest, newest first")
    ls.add_argument("--json", action="store_true")
    sh = action("show", "one savepoint's manifest", with_id=True)
    sh.add_argument("--json", action="store_true")
    pr = action("prune", "apply the registry's retention (keep_last, max_age); never the newest")
    pr.add_argument("--dry-run", action="store_true", help="print what would be deleted, delete nothing")
    pr.add_argument("--keep-last", type=int, help="override the registry's savepoints.keep_last")
    pr.add_argument("--max-age", help="override the registry's savepoints.max_age (e.g. 7d)")
    pr.add_argument("--incomplete-older-than", default="1h", metavar="DURATION",
                    help="remove manifest-less leftovers older than this (default 1h)")
    pr.add_argument("--json", action="store_true")
    rs = action("restore", "download and verify a savepoint into a fresh checkpoint and point the stream at it",
                with_id=True)
    rs.add_argument("--to", metavar="PATH|s3a://...", help="new checkpoint directory (must not exist or be empty), "
                                                          "or a fresh s3a:// prefix (default: beside the checkpoint)")
    rs.add_argument("--no-progress", action="store_true")
    rs.add_argument("--json", action="store_true")
    hi = action("history", "the stream's upgrades and state rescales: from, to, mode, savepoint, result (newest last)")
    hi.add_argument("--json", action="store_true")


def retry_command(args: argparse.Namespace) -> str:
    argv = ["rewind", "savepoint", args.savepoint_action, args.stream]
    if getattr(args, "savepoint_id", None):
        argv.append(args.savepoint_id)
    for flag in ("stop", "no_restart", "dry_run"):
        if getattr(args, flag, False):
            argv.append("--" + flag.replace("_", "-"))
    for opt in ("registry", "bucket", "bootstrap", "to"):
        if getattr(args, opt, None):
            argv += ["--" + opt, str(getattr(args, opt))]
    return shlex.join(argv)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def cmd_savepoint(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.storage import S3Storage, S3Unreachable, resolve_s3_config  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    if args.savepoint_action == "history":  # the stream's own records: no S3 needed
        return _history(args, spec)
    try:
        store = S3Storage(resolve_s3_config(args.bucket))
        return int(ACTIONS[args.savepoint_action](args, spec, store))
    except S3Unreachable as exc:  # what was left as it was, and the command that retries it
        what = {"create": "the savepoint was not completed (no manifest was written)",
                "prune": "pruning stopped part-way (a savepoint loses its manifest first, so none is half-usable)",
                }.get(args.savepoint_action, "nothing was changed")
        exc.add_note(f"{what}; when S3 answers again, retry: {retry_command(args)}")
        raise


def _create(args: argparse.Namespace, spec: Any, store: Any) -> int:
    from rewind.checkpoints.manifest import savepoint_prefix  # lazy: start-up of the CLI
    from rewind.checkpoints.savepoints import create_savepoint, savepoint_with_stop  # lazy: start-up of the CLI

    started = time.monotonic()
    if args.stop:
        from rewind.supervision.process_control import stop_stream  # lazy: start-up of the CLI

        restart = None if args.no_restart else _restarter(args, spec)
        manifest = savepoint_with_stop(spec, store, stop=stop_stream, restart=restart, stop_timeout=args.stop_timeout,
                                       progress=not args.no_progress, on_event=_say)
    else:
        manifest = create_savepoint(spec, store, progress=not args.no_progress)
    seconds = time.monotonic() - started
    url = store.url(savepoint_prefix(spec.name, manifest.savepoint_id))
    if args.json:
        print(json.dumps({**manifest.summary(), "url": url, "seconds": round(seconds, 3)}))
    else:
        print(f"savepoint {manifest.savepoint_id} of {spec.name}: batch {manifest.batch_id}, {len(manifest.files)} "
              f"files, {_human_bytes(manifest.total_bytes)} in {seconds:.1f}s -> {url}")
    return 0


def _restarter(args: argparse.Namespace, spec: Any) -> Any:
    """The restart after --stop, resolved up front so a missing Kafka address fails before the stop."""
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI
    from rewind.supervision.process_control import (  # lazy: start-up of the CLI
        default_log_path,
        launch_stream,
        wait_running,
    )

    bootstrap = resolve_bootstrap(args.bootstrap)
    log_path = default_log_path(spec)

    def restart() -> None:
        pid = launch_stream(spec, args.registry, bootstrap, log_path)
        wait_running(spec, pid, timeout=180.0, log_path=log_path)
        _say(f"{spec.name} is running again (pid {pid}, log {log_path})")

    return restart


def _age(created: datetime) -> str:
    s = (datetime.now(UTC) - created).total_seconds()
    return f"{s / 86400:.1f}d" if s >= 86400 else f"{s / 3600:.1f}h" if s >= 3600 else f"{s / 60:.0f}m"


def _list(args: argparse.Namespace, spec: Any, store: Any) -> int:
    from rewind.checkpoints.savepoints import list_savepoints  # lazy: start-up of the CLI

    listing = list_savepoints(store, spec.name)
    if args.json:
        print(json.dumps({"savepoints": [m.summary() for m in listing.complete],
                          "incomplete": len(listing.incomplete)}, default=str))
        return 0
    print(f"{'id':32}  {'batch':>6}  {'mode':6}  {'files':>5}  {'size':>10}  {'age':>6}  created")
    for m in listing.complete:
        print(f"{m.savepoint_id:32}  {m.batch_id:>6}  {m.mode:6}  {len(m.files):>5}  "
              f"{_human_bytes(m.total_bytes):>10}  {_age(m.created_at):>6}  {m.created_at:%Y-%m-%d %H:%M:%S}Z")
    if not listing.complete:
        print(f"no savepoints of {spec.name} in {store.url('savepoints/' + spec.name + '/')}")
    if listing.incomplete:
        _say(f"({len(listing.incomplete)} incomplete copy/copies without a manifest are not savepoints; "
             "`rewind savepoint prune` removes them once older than 1h)")
    return 0


def _show(args: argparse.Namespace, spec: Any, store: Any) -> int:
    from rewind.checkpoints.savepoints import load_manifest  # lazy: start-up of the CLI

    m = load_manifest(store, spec.name, args.savepoint_id)
    if args.json:
        print(m.to_json())
        return 0
    summary = m.summary()
    for key in ("savepoint_id", "stream", "batch_id", "mode", "created_at", "spark_version", "config_hash",
                "query_id", "source_checkpoint", "file_count"):
        print(f"{key:18} {summary[key]}")
    print(f"{'total_bytes':18} {m.total_bytes} ({_human_bytes(m.total_bytes)})")
    print(f"{'offsets':18} {json.dumps(m.offsets)}")
    print(f"{'state_versions':18} {json.dumps(m.state_versions)}")
    return 0


def _prune(args: argparse.Namespace, spec: Any, store: Any) -> int:
    from rewind.checkpoints.retention import plan_prune  # lazy: start-up of the CLI
    from rewind.checkpoints.savepoints import apply_prune, list_savepoints  # lazy: start-up of the CLI
    from rewind.registry import parse_duration  # lazy: start-up of the CLI

    keep_last = args.keep_last if args.keep_last is not None else spec.savepoints.keep_last
    if keep_last < 1:
        raise ValueError("--keep-last must be at least 1 (the newest savepoint is never deleted)")
    max_age = parse_duration(args.max_age or spec.savepoints.max_age)
    plan = plan_prune(list_savepoints(store, spec.name), keep_last, max_age, datetime.now(UTC),
                      parse_duration(args.incomplete_older_than))
    if not args.dry_run:
        apply_prune(store, spec.name, plan)
    verb = "would delete" if args.dry_run else "deleted"
    if args.json:
        print(json.dumps({**plan.to_json(), "dry_run": args.dry_run}))
        return 0
    print(f"retention for {spec.name}: keep the newest {keep_last}, "
          f"none older than {args.max_age or spec.savepoints.max_age} (the newest is always kept)")
    for m in plan.delete:
        print(f"  {verb} {m.savepoint_id} (batch {m.batch_id}, {_age(m.created_at)} old)")
    for i in plan.leftovers:
        print(f"  {verb} incomplete leftover {i.savepoint_id} ({i.objects} objects, {_human_bytes(i.bytes)}, "
              f"{_age(i.newest)} old: {i.reason})")
    for i in plan.young_leftovers:
        print(f"  kept incomplete {i.savepoint_id} ({_age(i.newest)} old: may be a copy in progress)")
    print(f"  kept {len(plan.keep)}: {', '.join(m.savepoint_id for m in plan.keep) or 'none'}")
    return 0


def _restore(args: argparse.Namespace, spec: Any, store: Any) -> int:
    from rewind.checkpoints.savepoints import restore_savepoint  # lazy: start-up of the CLI
    from rewind.supervision.observe import running_reason  # lazy: start-up of the CLI

    result = restore_savepoint(spec, store, args.savepoint_id, running=running_reason(spec), to=args.to,
                               progress=not args.no_progress)
    for warning in result.warnings:
        _say(f"warning: {warning}")
    m = result.manifest
    if args.json:
        print(json.dumps({"savepoint_id": m.savepoint_id, "batch_id": m.batch_id, "path": str(result.path),
                          "files": len(m.files), "total_bytes": m.total_bytes, "seconds": round(result.seconds, 3),
                          "warnings": list(result.warnings)}))
        return 0
    print(f"restored savepoint {m.savepoint_id} (batch {m.batch_id}, {len(m.files)} files, "
          f"{_human_bytes(m.total_bytes)}, every checksum verified) into {result.path} in {result.seconds:.1f}s;\n"
          f"{spec.name} now resumes from it at offsets {json.dumps(m.offsets)} (the previous checkpoint is kept)")
    return 0


def _history(args: argparse.Namespace, spec: Any) -> int:
    from rewind.upgrade.history import read_history  # lazy: start-up of the CLI
    from rewind.upgrade.views import history_rows  # lazy: start-up of the CLI

    rows = history_rows(read_history(spec))
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    if not rows:
        print(f"no upgrade or repartition of {spec.name} recorded")
    for r in rows:
        print(f"{r['started']}  {r['kind']:11} {r['mode']:11} {r['change']:50} savepoint {r['savepoint'] or '-':28} "
              f"{r['result']}{': ' + r['reason'] if r['reason'] else ''}")
    return 0


ACTIONS = {"create": _create, "list": _list, "show": _show, "prune": _prune, "restore": _restore}
