"""`rewind replay plan`: show exactly which Kafka range a replay would read (rewind/replay_plan.py).

`plan` changes nothing. Exit codes: 0 planned, 1 Kafka did not answer (worth retrying),
2 refused (bad input, unknown stream/topic/partition, range beyond retention or past the end),
with every reason on stderr. The range arguments live in ``add_range_arguments`` so a later
``replay run`` in the same ``replay`` group takes exactly the same input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rewind.replay_plan import DEFAULT_COUNT_CAP


def add_replay_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``rewind replay`` and its ``plan`` action; returns the action group's parser so
    other actions (``run``) can be added beside ``plan``."""
    rp = subparsers.add_parser("replay", help="replay a Kafka range into the sink: plan (dry run)",
                               description="Replay an explicit Kafka range [from, to) of a stream. Bounds are "
                                           "offsets (applied to every selected partition), 'earliest'/'latest', "
                                           "ISO 8601 timestamps with a zone (2026-11-22T03:00:00Z, "
                                           "...T04:00:00+01:00), or per-partition JSON like "
                                           '\'{"topic":{"0":12,"1":40}}\'.')
    actions = rp.add_subparsers(dest="replay_action", required=True)
    plan = actions.add_parser("plan", help="print the exact offsets and record counts per partition; "
                                           "changes nothing (exit 2 = refused)")
    add_range_arguments(plan)
    plan.add_argument("--count-cap", type=int, default=DEFAULT_COUNT_CAP, metavar="OFFSETS",
                      help="count records exactly only when the whole range spans at most this many offsets "
                           f"(default {DEFAULT_COUNT_CAP:,}); above it, counts are upper bounds")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=cmd_replay_plan)
    return rp


def add_range_arguments(p: argparse.ArgumentParser) -> None:
    """The input every replay action takes: stream, range, selection, registry, Kafka."""
    p.add_argument("stream")
    p.add_argument("--from", dest="start", required=True, metavar="FROM",
                   help="first offset/timestamp of the range (inclusive)")
    p.add_argument("--to", dest="end", required=True, metavar="TO",
                   help="end of the range (exclusive): the first offset/timestamp NOT replayed")
    p.add_argument("--topics", help="comma-separated subset of the stream's topics (default: all)")
    p.add_argument("--partitions", help="comma-separated partition numbers (default: all)")
    p.add_argument("--allow-beyond-retention", action="store_true",
                   help="replay what is left when part of the range was already deleted (the missing "
                        "offsets are reported)")
    p.add_argument("--registry")
    p.add_argument("--bootstrap")


def build_plan(args: argparse.Namespace) -> Any:
    """Parse and validate (no Kafka needed to refuse bad input), then plan against Kafka."""
    from rewind.cli import resolve_bootstrap
    from rewind.registry import load_registry
    from rewind.replay_plan import ReplayRequest, plan_replay

    registry = load_registry(args.registry)  # RegistryError (file missing, invalid): exit 2 in cli.main
    request = ReplayRequest.parse(args.stream, args.start, args.end, args.topics, args.partitions,
                                  args.allow_beyond_retention, registry=registry)
    return plan_replay(request, registry, resolve_bootstrap(args.bootstrap),
                       count_cap=getattr(args, "count_cap", DEFAULT_COUNT_CAP))


def cmd_replay_plan(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from rewind.kafka.client import KafkaTimeoutError
    from rewind.replay_plan import ReplayRefused, format_plan

    try:
        plan = build_plan(args)
    except ReplayRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"refused": True, "problems": [p.to_json() for p in exc.problems]}))
        return 2
    except (KafkaTimeoutError, KafkaException) as exc:
        print(f"error: Kafka did not answer the look-ups: {exc}; nothing was changed, retry when it does",
              file=sys.stderr)
        return 1
    print(json.dumps(plan.to_json()) if args.json else format_plan(plan))
    return 0
