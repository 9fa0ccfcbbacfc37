"""`rewind verify STREAM`: every Kafka record against the sink, read with a plain consumer."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from rewind.cli.common import add_bootstrap, add_registry, command
from rewind.errors import EXIT_OK, EXIT_PROOF_VIOLATION, Refused


def add_parser(sub: Any) -> None:
    v = command(sub, "verify", "prove exactly-once: every Kafka record against the sink",
                "Re-read the stream's topics with a plain consumer and check every record against the sink: each "
                "event once, each malformed, late or behind-the-watermark record in the dead-letter table, nothing "
                "else. The proof answers for what the stream had committed when it began: the records below its last "
                "committed batch's end offsets, the rows of that batch or earlier (running or not).",
                codes={EXIT_PROOF_VIOLATION: "proof violation: duplicates, gaps or wrong rows (the JSON says which)"})
    v.add_argument("stream")
    add_registry(v)
    add_bootstrap(v)
    v.add_argument("--json", action="store_true",
                   help="the summary as one line of JSON on stdout (the verdict line then goes to stderr)")
    v.add_argument("--all", action="store_true",
                   help="every record from the beginning up to the last committed batch (the default range; with no "
                        "committed batch yet, every record in the topics instead of 'nothing to prove')")
    span = v.add_mutually_exclusive_group()
    span.add_argument("--since-last-proof", action="store_true",
                      help="dq_suite contract: prove only the records after the last passed proof's end (its cursor, "
                           "in the stream's control store), in memory bounded by that range; a pass moves the cursor")
    span.add_argument("--since", metavar="TIME", type=_utc_time,
                      help="dq_suite contract: prove the records from this time (ISO 8601, UTC if no offset) on")
    v.set_defaults(func=run)


class VerifyRefused(Refused, ValueError):
    """A verify request that cannot be honoured (nothing was read)."""


def _utc_time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r} (e.g. 2026-11-24T08:00:00Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def run(args: argparse.Namespace) -> int:
    from rewind.kafka.types import TP, offsets_to_json  # lazy: start-up of the CLI
    from rewind.proof.cursor import Since  # lazy: start-up of the CLI
    from rewind.proof.scope import committed_position, nothing_to_prove  # lazy: start-up of the CLI
    from rewind.proof.verify import verify_stream  # lazy: start-up of the CLI
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    # First, before Kafka and the sink: what the stream had committed. The proof answers for that
    # and no more, running or not (rows of later batches are not judged: no false alarm).
    position = committed_position(spec)
    explicit = bool(args.all or args.since or args.since_last_proof)
    empty = nothing_to_prove(spec.name, position.batch, explicit)
    if empty:  # no committed batch: no FAIL for records the stream has not reached yet
        return _print(args, spec.name, {"stream": spec.name, "ok": True, "nothing_to_prove": empty})
    bounds = position.end_offsets
    if bounds is not None:
        print(f"{position.describe(spec.name)}: the records below offsets "
              f"{offsets_to_json({TP(*tp): end for tp, end in bounds.items()})}", file=sys.stderr)
    since: Since | None = "cursor" if args.since_last_proof else "time" if args.since else None
    from rewind.proof.suite import suite_of  # lazy: start-up of the CLI

    suite = suite_of(spec)
    if suite == "contract":  # any stream: proven from what its transform declares
        from rewind.proof.contract_proof import verify_contract_stream  # lazy: start-up of the CLI

        report: Any = verify_contract_stream(spec, resolve_bootstrap(args.bootstrap), bounds, since=since,
                                             since_time=args.since, committed=position)
        for note in report.notes:
            print(f"{spec.name}: {note}", file=sys.stderr)
    elif since is not None:
        raise VerifyRefused(f"stream {spec.name}: --since-last-proof and --since are for dq_suite 'contract' streams; "
                            f"its suite {suite!r} proves every record from the beginning")
    else:
        report = verify_stream(spec, resolve_bootstrap(args.bootstrap), bounds, committed=position)
    return _print(args, spec.name, report.summary())


def _print(args: argparse.Namespace, stream: str, summary: dict[str, Any]) -> int:
    """The verdict line first; then the notes and the figures, or (``--json``) the summary as JSON on stdout."""
    from rewind.proof.verdict import problems_of, verdict_line  # lazy: start-up of the CLI

    line = verdict_line(stream, summary)
    if args.json:
        print(line, file=sys.stderr)
        print(json.dumps(summary, default=str))
    else:
        print(line)
        for name, count in problems_of(summary).items():
            examples = (summary.get(name) or {}).get("examples") if isinstance(summary.get(name), dict) else None
            print(f"  {name}: {count}" + (f", e.g. {json.dumps(examples[:3], default=str)}" if examples else ""))
        if not summary.get("nothing_to_prove"):
            print(f"  (the whole summary: rewind verify {stream} --json)")
    return EXIT_OK if summary.get("ok") else EXIT_PROOF_VIOLATION
