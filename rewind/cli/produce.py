"""`rewind produce`: demo events with deterministic ids and optional faults (malformed, late, duplicate)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import Any

from rewind.cli.common import add_bootstrap, command
from rewind.errors import Refused


def add_parser(sub: Any) -> None:
    pr = command(sub, "produce", "send demo events (deterministic ids) with optional faults")
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
    add_bootstrap(pr)
    pr.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.demo.producer import ProduceSpec, produce  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    spec = ProduceSpec(topic=args.topic, count=args.count, rate=args.rate, partitions=args.partitions,
                       id_prefix=args.id_prefix, start_seq=args.start_seq, keys=args.keys,
                       malformed_every=args.malformed_every, late_every=args.late_every,
                       late_by=timedelta(seconds=args.late_by), duplicate_every=args.duplicate_every,
                       transactional=args.transactional, keyless=args.keyless)
    try:
        spec.validate()
    except ValueError as exc:
        raise Refused(str(exc)) from None
    report = produce(resolve_bootstrap(args.bootstrap), spec,
                     progress=lambda r: print(f"  sent {r.sent} ({r.sent / max(r.seconds, 1e-9):.0f}/s)",
                                              file=sys.stderr, flush=True))
    print(json.dumps(report.summary()))
    return 0
