"""`rewind replay plan|run`: which Kafka range a replay reads (rewind/replay/planner.py), and the
replay itself (rewind/replay/run.py).

`plan` and `run --dry-run` change nothing. Exit codes: 0 planned / replayed and proven,
1 a runtime failure (Kafka did not answer, Spark or the sink failed: worth retrying, the writes
are idempotent), 3 refused (bad input, unknown stream/topic/partition, range beyond retention
or past the end, nothing to replay, another replay of the stream running), 4 the DQ proof
over the replayed range failed, with every reason on stderr. ``run`` takes the same range arguments as ``plan``
(``add_range_arguments``); ``job_main`` is the spark-submit entry (spark_jobs/replay.py),
which also accepts a plan made earlier (``--plan-json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewind.cli.common import command
from rewind.errors import EXIT_FAILED, EXIT_REFUSED
from rewind.kafka.types import KafkaTimeoutError
from rewind.replay.plan import DEFAULT_COUNT_CAP, ReplayPlan, format_plan
from rewind.replay.problems import ReplayRefused, refuse
from rewind.replay.request import ReplayRequest

REPLAY_CODES = {3: "refused: bad input, unknown stream/topic/partition, a range beyond retention or past the end, "
                   "nothing to replay, another replay of the stream running (every reason is listed)",
                4: "proof violation: the DQ proof over the replayed range failed"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``rewind replay`` and its ``plan`` action; returns the action group's parser so
    other actions (``run``) can be added beside ``plan``."""
    rp = command(subparsers, "replay", "replay a Kafka range into the sink: plan, run (--dry-run)", codes=REPLAY_CODES,
                 description="Replay an explicit Kafka range [from, to) of a stream. Bounds are "
                                           "offsets (applied to every selected partition), 'earliest'/'latest', "
                                           "ISO 8601 timestamps with a zone (2026-11-22T03:00:00Z, "
                                           "...T04:00:00+01:00), or per-partition JSON like "
                                           '\'{"topic":{"0":12,"1":40}}\'.')
    actions = rp.add_subparsers(dest="replay_action", required=True)
    plan = command(actions, "plan", "print the exact offsets and record counts per partition; changes nothing",
                   codes=REPLAY_CODES)
    add_range_arguments(plan)
    plan.add_argument("--count-cap", type=int, default=DEFAULT_COUNT_CAP, metavar="OFFSETS",
                      help="count records exactly only when the whole range spans at most this many offsets "
                           f"(default {DEFAULT_COUNT_CAP:,}); above it, counts are upper bounds")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=cmd_replay_plan)
    run = command(actions, "run", "replay the range through the stream's transform into its sink, then prove it",
                  codes=REPLAY_CODES)
    add_range_arguments(run)
    add_run_arguments(run)
    run.set_defaults(func=cmd_replay_run)
    return rp


def add_range_arguments(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The input every replay action takes: stream, range, selection, registry, Kafka."""
    p.add_argument("stream")
    p.add_argument("--from", dest="start", required=required, metavar="FROM",
                   help="first offset/timestamp of the range (inclusive)")
    p.add_argument("--to", dest="end", required=required, metavar="TO",
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
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.replay.planner import plan_replay  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    registry = load_registry(args.registry)  # RegistryError (file missing, invalid): exit 2 in cli.main
    request = ReplayRequest.parse(args.stream, args.start, args.end, args.topics, args.partitions,
                                  args.allow_beyond_retention, registry=registry)
    return plan_replay(request, registry, resolve_bootstrap(args.bootstrap),
                       count_cap=getattr(args, "count_cap", DEFAULT_COUNT_CAP))


def cmd_replay_plan(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException


    try:
        plan = build_plan(args)
    except ReplayRefused as exc:
        return _refused(exc, args.json)
    except (KafkaTimeoutError, KafkaException) as exc:
        print(f"error: Kafka did not answer the look-ups: {exc}; nothing was changed, retry when it does",
              file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(plan.to_json()) if args.json else format_plan(plan))
    return 0


# ---------------------------------------------------------------------------------------------
# rewind replay run
# ---------------------------------------------------------------------------------------------


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from rewind.replay.setup import DEFAULT_CHUNK_OFFSETS  # lazy: start-up of the CLI

    p.add_argument("--mode", default="into-sink", metavar="MODE",
                   help="into-sink (default: restore into the stream's tables, idempotently) or shadow (separate "
                        "tables named for the replay, compared with the main tables, which stay untouched)")
    p.add_argument("--replay-id", metavar="ID", help="a-z, 0-9, '-', '_' (default: time + random)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and what would be written where; "
                                                          "change nothing")
    p.add_argument("--json", action="store_true", help="print the report (or dry-run plan) as JSON")
    p.add_argument("--run-dir", metavar="DIR", help="where the report and proof go "
                                                    "(default: $REWIND_HOME/replays/STREAM/REPLAY_ID)")
    p.add_argument("--no-s3", action="store_true", help="keep the report and proof local only")
    p.add_argument("--bucket", help="S3 bucket (default: $REWIND_S3_BUCKET, else the embedded platform's)")
    p.add_argument("--chunk-offsets", type=int, default=DEFAULT_CHUNK_OFFSETS, metavar="N",
                   help=f"offsets per Spark job (default {DEFAULT_CHUNK_OFFSETS:,}): bounds memory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (one log line per chunk stays)")
    p.add_argument("--reprocess-late", action="store_true",
                   help="bring the range's records the stream dead-lettered as behind_watermark back into its tables "
                        "(their aggregate groups recomputed whole, then their dead letters deleted); see "
                        "docs/add-your-stream.md, 'Late records'")


def _s3_store(args: argparse.Namespace) -> Any:
    if args.no_s3:
        return None
    from rewind.storage import S3Error, S3Storage, resolve_s3_config  # lazy: start-up of the CLI

    try:
        config = resolve_s3_config(args.bucket, require_bucket=False)
    except S3Error as exc:  # pragma: no cover - resolve only raises when a bucket is required
        print(f"warning: {exc}; the report stays local", file=sys.stderr)
        return None
    if not config.bucket:
        print("warning: no S3 bucket configured (REWIND_S3_BUCKET, --bucket or `rewind services up`); the report "
              "stays local (use --no-s3 to silence this)", file=sys.stderr)
        return None
    return S3Storage(config)


def _refused(exc: Any, as_json: bool) -> int:
    print(f"refused: {exc}", file=sys.stderr)
    if as_json:
        print(json.dumps({"refused": True, "problems": [p.to_json() for p in exc.problems]}))
    return EXIT_REFUSED


def cmd_replay_run(args: argparse.Namespace) -> int:
    return _run(args, plan_json=None)


def _run(args: argparse.Namespace, plan_json: str | None) -> int:
    from confluent_kafka import KafkaException

    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.replay.guard import check_mode, check_replay_id  # lazy: start-up of the CLI
    from rewind.replay.report import ReplayFailed, ReplayProofFailed, format_report  # lazy: start-up of the CLI
    from rewind.replay.run import describe_replay, run_replay  # lazy: start-up of the CLI
    from rewind.replay.setup import prepare_replay  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    try:
        check_mode(args.mode)  # bad mode or id: refused before Kafka is asked anything
        if args.replay_id is not None:
            check_replay_id(args.replay_id)
        if plan_json is not None:
            spec = load_registry(args.registry).get(args.stream)
            try:
                plan = ReplayPlan.from_json(plan_json)
            except (ValueError, KeyError, TypeError) as exc:
                raise refuse("bad_plan", f"--plan-json is not a plan from `rewind replay plan --json` "
                                         f"({type(exc).__name__}: {exc})") from None
        else:
            plan = build_plan(args)
            spec = load_registry(args.registry).get(args.stream)
        setup = prepare_replay(spec, plan, mode=args.mode, replay_id=args.replay_id, run_dir=args.run_dir,
                               reprocess_late=args.reprocess_late)
    except ReplayRefused as exc:
        return _refused(exc, args.json)
    except (KafkaTimeoutError, KafkaException) as exc:
        print(f"error: Kafka did not answer the look-ups: {exc}; nothing was changed, retry when it does",
              file=sys.stderr)
        return EXIT_FAILED
    store = _s3_store(args)
    if args.dry_run:
        from rewind.replay.job import check_before_writing  # lazy: start-up of the CLI

        try:
            check_before_writing(setup, resolve_bootstrap(args.bootstrap))  # what a run would refuse
        except ReplayRefused as exc:
            return _refused(exc, args.json)
        if args.json:
            from rewind.api.contract import load_transform  # lazy: start-up of the CLI

            names = [t.name for t in load_transform(spec).tables]
            print(json.dumps({"dry_run": True, "replay_id": setup.replay_id, "mode": setup.mode,
                              "tables": {t: f"{setup.table_prefix}{t}" for t in names},
                              "run_dir": str(setup.run_dir), "plan": plan.to_json()}))
        else:
            print(describe_replay(setup, store.url("") if store is not None else None, args.chunk_offsets))
        return 0
    try:
        report = run_replay(spec, plan, resolve_bootstrap(args.bootstrap), mode=setup.mode,
                            replay_id=setup.replay_id, run_dir=setup.run_dir, s3=store,
                            progress=not args.no_progress, chunk_offsets=args.chunk_offsets,
                            reprocess_late=args.reprocess_late)
    except ReplayRefused as exc:
        return _refused(exc, args.json)
    except ReplayFailed as exc:
        print(json.dumps(exc.report.to_json()) if args.json else format_report(exc.report))
        if not isinstance(exc, ReplayProofFailed):
            print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(report.to_json()) if args.json else format_report(report))
    return 0


def job_main(argv: list[str]) -> int:
    """spark-submit entry (spark_jobs/replay.py): ``STREAM --plan-json FILE | --from X --to Y ...``."""
    import logging

    p = argparse.ArgumentParser(prog="replay.py", description="Run one replay (see `rewind replay run --help`).")
    add_range_arguments(p, required=False)
    add_run_arguments(p)
    p.add_argument("--plan-json", metavar="FILE", help="a plan from `rewind replay plan --json` (instead of "
                                                       "--from/--to; '-' reads stdin)")
    args = p.parse_args(argv)
    bounds = [b for b in (args.start, args.end) if b is not None]
    if (args.plan_json is not None and bounds) or (args.plan_json is None and len(bounds) < 2):
        p.error("give either --plan-json FILE or both --from and --to")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "boto3", "urllib3", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from rewind.registry import RegistryError  # lazy: start-up of the CLI

    text = None
    if args.plan_json is not None:
        try:
            text = sys.stdin.read() if args.plan_json == "-" else Path(args.plan_json).read_text()
        except OSError as exc:
            p.error(f"--plan-json: {exc}")
    try:
        return _run(args, plan_json=text)
    except RegistryError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return exc.exit_code
