"""`rewind chaos STREAM`: the stream under supervision through a seeded schedule of faults, then the proof.

Exit codes: 0 every invariant held; 4 an invariant failed (the report names it); 1 the harness
could not run (a service did not start, the stream cannot be put through chaos). ``--plan``
prints the schedule the seed gives and changes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rewind.cli.common import command


def add_parser(subparsers: Any) -> None:
    c = command(
        subparsers, "chaos", "run a stream under supervision through seeded faults, then prove exactly-once",
        codes={4: "proof violation: an invariant failed (the report names it)",
               1: "failed: the harness itself could not complete (a partial report says how far it got)",
               3: "refused: the run cannot be scheduled or the stream cannot be used (nothing ran)"},
        description="Runs a throwaway copy of STREAM (its transform and settings; its own Kafka, S3, checkpoint and "
                    "sink under --report) under the supervisor while a producer writes a known set of events "
                    "(duplicates, malformed and late records included), and injects faults on a schedule the seed "
                    "reproduces: SIGKILL of the stream (some during a batch commit), broker restarts, S3 unavailable "
                    "during a savepoint, a checkpoint corrupted while the stream is down, a replay of an "
                    "already-processed range while it runs, a restart after an outage in which the partitions received "
                    "backlogs skewed in event time by more than the watermark delay (records behind the watermark must "
                    "end as behind_watermark dead letters). Then the DQ proof and the verifier run over everything. "
                    "")
    c.add_argument("stream")
    c.add_argument("--registry")
    c.add_argument("--seed", type=int, default=7, help="the schedule's seed (default 7)")
    c.add_argument("--events", type=int, default=100_000, help="events to produce (default 100,000)")
    c.add_argument("--kills", type=int, default=10, help="SIGKILLs of the stream (default 10)")
    c.add_argument("--broker-restarts", type=int, default=1)
    c.add_argument("--corruptions", type=int, default=1, help="checkpoint damage while down (each kills first)")
    c.add_argument("--replays", type=int, default=1, help="replays of processed ranges while the stream runs")
    c.add_argument("--s3-outages", type=int, default=1, help="S3 cut during a savepoint")
    c.add_argument("--skewed-restarts", type=int, default=1,
                   help="stops during which the segment arrives as unequal backlogs, one partition's event times "
                        "older than the others' by more than the watermark delay; then a restart (default 1)")
    c.add_argument("--report", metavar="DIR",
                   help="where everything goes (default: $REWIND_HOME/chaos/STREAM/TIME-seedN)")
    c.add_argument("--sink-url", help="sink database for the copy (default: a SQLite file under --report)")
    c.add_argument("--rate", type=float, help="producer events/s (default: a segment of events per ~12 s)")
    c.add_argument("--plan", action="store_true", help="print the schedule and exit; nothing runs")
    c.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    c.set_defaults(func=cmd_chaos)


def cmd_chaos(args: argparse.Namespace) -> int:
    from rewind.chaos.schedule import ChaosConfig, make_schedule  # lazy: start-up of the CLI
    from rewind.chaos.timeline import check_timeline  # lazy: start-up of the CLI

    config = ChaosConfig(seed=args.seed, events=args.events, kills=args.kills, broker_restarts=args.broker_restarts,
                         corruptions=args.corruptions, replays=args.replays, s3_outages=args.s3_outages,
                         skewed_restarts=args.skewed_restarts)
    schedule = make_schedule(config)  # ScheduleError: refused (exit 3)
    if args.plan:
        problems = check_timeline(schedule)
        if args.json:
            print(json.dumps({**schedule.to_json(), "problems": problems}, indent=1))
        else:
            print(f"seed {config.seed}: {len(schedule.faults)} faults over {config.events:,} events "
                  f"(first {schedule.first_release:,} events before the first fault)")
            print("\n".join(f.describe() for f in schedule.faults))
            print("\n".join(f"PROBLEM: {p}" for p in problems) or "timeline: every fault makes sense where it runs")
        return 4 if problems else 0

    import logging

    from rewind.chaos.harness import (  # lazy: start-up of the CLI
        ChaosHarnessError,
        ChaosOptions,
        ChaosRefused,
        run_chaos,
    )

    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # per-expectation INFO lines

    opts = ChaosOptions(stream=args.stream, registry=args.registry, config=config,
                        report_dir=Path(args.report) if args.report else None, sink_url=args.sink_url, rate=args.rate)
    try:
        report = run_chaos(opts)  # ChaosRefused: refused (exit 3)
    except (ChaosRefused, ChaosHarnessError):
        raise
    except Exception as exc:  # noqa: BLE001 - the harness itself failed (not an invariant)
        raise ChaosHarnessError(f"the chaos run could not complete: {type(exc).__name__}: {exc}") from exc
    text = report.pop("text")
    print(json.dumps(report, default=str) if args.json else text)
    return 0 if report["ok"] else 4
