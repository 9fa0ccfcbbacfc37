"""`rewind stream upgrade NAME --registry-entry FILE --mode stateless|last-state|savepoint|blue-green`: the command
line of ``rewind.upgrade.run`` (its parser is added to ``rewind stream``'s actions)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewind.cli.common import add_bootstrap, add_registry, command
from rewind.errors import EXIT_FAILED, EXIT_OK


def add_parser(actions: Any) -> None:
    up = command(actions, "upgrade", "change a stream's registry entry (its transform and settings) safely",
                 "Checks the new version before anything stops (it runs one batch on a copy of the newest savepoint, "
                 "into a throwaway sink: Spark's state schema check, the output tables' compatibility), then stops "
                 "the stream with a savepoint, switches its checkpoint by --mode and its entry in the registry, "
                 "launches the new version and watches it; when it commits no batch within the startup grace or "
                 "crash-loops, Rewind rolls back to the savepoint and the previous entry. Modes: savepoint (restore "
                 "the stop's savepoint into a fresh checkpoint), last-state (resume the same checkpoint), stateless "
                 "(a new checkpoint from the committed offsets, state dropped: refused for a stream with state unless "
                 "--force), blue-green (the new version starts from a savepoint beside the live one, into shadow "
                 "tables, is proven there and compared with the live tables, then takes over: the live one stops "
                 "past it and the new one re-reads the overlap, written once; an abort leaves the live one "
                 "running). The new entry is a registry file in the registry's own format, `streams: {NAME: {...}}` "
                 "(one stream, or an otherwise unchanged copy of the registry); the registry file itself is rewritten "
                 "(only NAME's entry), and the entry it replaced is kept by its config hash. See docs/upgrades.md.",
                 codes={EXIT_FAILED: "failed: the new version did not become healthy and was rolled back (the message "
                                     "says why), or a step broke (the message says where the stream was left)",
                        3: "refused: a new entry that fails validation or names a transform that fails to load, a "
                           "mode that cannot apply, incompatible state or tables, a pre-flight batch that failed, "
                           "another upgrade running, a blue-green new version that failed beside the live one; the "
                           "live stream was not touched"})
    up.add_argument("stream")
    up.add_argument("--registry-entry", required=True, metavar="FILE",
                    help="the new entry: a registry file `streams: {NAME: {...}}` (- reads standard input)")
    up.add_argument("--mode", required=True, choices=["stateless", "last-state", "savepoint", "blue-green"])
    up.add_argument("--force", action="store_true", help="stateless: drop the state of a stream that has some")
    up.add_argument("--grace", type=float, metavar="SECONDS",
                    help="how long the new version has to commit a batch (default: its supervision.startup_grace)")
    up.add_argument("--stop-timeout", type=float, default=120.0, metavar="SECONDS")
    up.add_argument("--bucket", help="S3 bucket of the savepoints (default: $REWIND_S3_BUCKET, else the embedded "
                                     "platform's)")
    up.add_argument("--json", action="store_true", help="print the history record as JSON")
    add_registry(up)
    add_bootstrap(up)
    up.set_defaults(func=run)


def _say(step: str, detail: str) -> None:
    print(f"{step}: {detail}" if detail else step, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from rewind.settings import default_registry, resolve_bootstrap  # lazy: start-up of the CLI
    from rewind.storage import S3Storage, resolve_s3_config  # lazy: start-up of the CLI
    from rewind.supervision.process_control import (  # lazy: start-up of the CLI
        default_log_path,
        launch_stream,
        wait_running,
    )
    from rewind.upgrade.entry import EntryRefused  # lazy: start-up of the CLI
    from rewind.upgrade.preflight_job import job_files, read_outcome, run_local  # lazy: start-up of the CLI
    from rewind.upgrade.run import UpgradeRequest, prepare, upgrade  # lazy: start-up of the CLI

    registry = str(Path(args.registry) if args.registry else default_registry())
    where = "standard input" if args.registry_entry == "-" else args.registry_entry
    try:
        text = sys.stdin.read() if args.registry_entry == "-" else Path(args.registry_entry).read_text()
    except OSError as exc:
        raise EntryRefused(f"--registry-entry {where}: {exc.strerror or exc}; nothing was done") from None
    req = UpgradeRequest(args.stream, registry, text, where, args.mode, args.force, args.grace, args.stop_timeout)
    prepared = prepare(req)  # bad input is refused here, before Kafka, S3 or Spark are asked anything
    bootstrap = resolve_bootstrap(args.bootstrap)
    store = S3Storage(resolve_s3_config(args.bucket))

    def start(spec: Any) -> int:
        log_path = default_log_path(spec)
        pid = launch_stream(spec, registry, bootstrap, log_path)
        return wait_running(spec, pid, timeout=240.0, log_path=log_path).pid

    def launch_green(spec: Any, green_registry: Path) -> int:  # beside the live one, its log beside its registry
        log_path = green_registry.with_suffix(".log")
        _say("green", f"the new version's log: {log_path}")
        pid = launch_stream(spec, green_registry, bootstrap, log_path)
        return wait_running(spec, pid, timeout=240.0, log_path=log_path).pid

    def run_preflight(p: Any, scratch: Path) -> Any:  # a child process, Spark's log in a file, one line here
        job = job_files(p, scratch, registry, bootstrap, args.bucket)
        log = scratch.parent / "preflight.log"
        _say("preflight", f"Spark's log: {log}")
        run_local(job.args, log)
        return read_outcome(job.outcome, str(log))

    record = upgrade(prepared, store, bootstrap, start, on_step=_say, run_preflight=run_preflight,
                     launch_green=launch_green)
    if args.json:
        print(json.dumps(record, default=str))
    if record["result"] == "upgraded":
        print(f"upgraded {args.stream} ({args.mode}): {record['from']['transform']} {record['from']['hash']} -> "
              f"{record['to']['transform']} {record['to']['hash']}; savepoint {record['savepoint']['id']} holds the "
              "state it was stopped at")
        return EXIT_OK
    print(f"rolled back {args.stream}: {record['reason']}; it runs its previous entry {record['from']['hash']} from "
          f"savepoint {record['savepoint']['id']}", file=sys.stderr)
    return EXIT_FAILED
