"""`rewind verify STREAM`: every Kafka record against the sink, read with a plain consumer."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rewind.cli.common import add_bootstrap, add_registry, command
from rewind.errors import EXIT_OK, EXIT_PROOF_VIOLATION


def add_parser(sub: Any) -> None:
    v = command(sub, "verify", "prove exactly-once: every Kafka record against the sink",
                "Re-read the stream's topics with a plain consumer and check every record against the sink: each "
                "event once, each malformed, late or behind-the-watermark record in the dead-letter table, nothing "
                "else. While the stream runs, the proof stops at its last committed batch (--all: everything).",
                codes={EXIT_PROOF_VIOLATION: "proof violation: duplicates, gaps or wrong rows (the JSON says which)"})
    v.add_argument("stream")
    add_registry(v)
    add_bootstrap(v)
    v.add_argument("--json", action="store_true", help="one line of JSON")
    v.add_argument("--all", action="store_true", help="every record in the topics, even while the stream runs")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.paths import status_path
    from rewind.platform.processes import pid_alive
    from rewind.proof.verify import committed_bounds, verify_stream
    from rewind.registry import load_registry
    from rewind.settings import resolve_bootstrap
    from rewind.stream.status import read_status

    spec = load_registry(args.registry).get(args.stream)
    status = read_status(status_path(spec.status_dir, spec.name))
    bounds = None
    if not args.all and status and status.state in ("starting", "running", "stopping") and pid_alive(status.pid):
        bounds = committed_bounds(status.end_offsets)
        print(f"{spec.name} is running: proving the records below its last committed batch's offsets "
              f"{status.end_offsets} (use --all once it has stopped)", file=sys.stderr)
    if spec.dq_suite == "contract":  # any stream: proven from what its transform declares
        from rewind.proof.contract_proof import verify_contract_stream

        report: Any = verify_contract_stream(spec, resolve_bootstrap(args.bootstrap), bounds)
    else:
        report = verify_stream(spec, resolve_bootstrap(args.bootstrap), bounds)
    print(json.dumps(report.summary(), indent=None if args.json else 1, default=str))
    return EXIT_OK if report.ok else EXIT_PROOF_VIOLATION
