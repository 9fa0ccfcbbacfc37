"""`rewind dq STREAM`: the Great Expectations proof of exactly-once output (rewind/proof/dq.py).

Exit codes: 0 the proof passed, 4 it failed (the text says which expectations, with
example rows). Results and Data Docs go to --run-dir (default
``$REWIND_HOME/dq/STREAM/RUN_ID``) and, unless --no-s3, to ``s3://BUCKET/dq/STREAM/RUN_ID/``
(the bucket as savepoints find it: $REWIND_S3_BUCKET, else the embedded platform's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewind.cli.common import command
from rewind.errors import EXIT_OK, EXIT_PROOF_VIOLATION


def add_parser(subparsers: Any) -> None:
    d = command(
        subparsers, "dq", "Great Expectations proof: no duplicates, no gaps, windows reconcile",
        codes={EXIT_PROOF_VIOLATION: "proof violation: the proof failed (the text names each expectation, with "
                                     "counts and example rows)"},
        description="Re-read the stream's Kafka range, validate the sink against it with Great Expectations, "
                    "store the validation result and Data Docs under --run-dir and in S3. The range ends at the "
                    "last committed batch while the stream runs, else at the end of its topics.")
    d.add_argument("stream")
    d.add_argument("--registry")
    d.add_argument("--bootstrap")
    d.add_argument("--run-dir", metavar="DIR", help="where results and Data Docs go "
                                                    "(default: $REWIND_HOME/dq/STREAM/RUN_ID)")
    d.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    d.add_argument("--no-s3", action="store_true", help="keep results local only")
    d.add_argument("--bucket", help="S3 bucket (default: $REWIND_S3_BUCKET, else the embedded platform's)")
    d.set_defaults(func=cmd_dq)


def cmd_dq(args: argparse.Namespace) -> int:
    from rewind.paths import paths_of  # lazy: start-up of the CLI
    from rewind.proof.dq import new_run_id, run_proof  # lazy: start-up of the CLI
    from rewind.proof.report import format_proof  # lazy: start-up of the CLI
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    run_id = new_run_id()
    run_dir = Path(args.run_dir) if args.run_dir else paths_of(spec).dq_run(run_id)
    store = None
    if not args.no_s3:
        from rewind.storage import S3Error, S3Storage, resolve_s3_config  # lazy: start-up of the CLI

        try:
            config = resolve_s3_config(args.bucket, require_bucket=False)
        except S3Error as exc:  # pragma: no cover - resolve only raises when a bucket is required
            config = None
            print(f"warning: {exc}; results stay local", file=sys.stderr)
        if config is not None and config.bucket:
            store = S3Storage(config)
        else:
            print("warning: no S3 bucket configured (REWIND_S3_BUCKET, --bucket or `rewind services up`); "
                  "results stay local (use --no-s3 to silence this)", file=sys.stderr)
    result = run_proof(spec, resolve_bootstrap(args.bootstrap), run_dir=run_dir, s3=store, run_id=run_id)
    print(json.dumps(result.to_json(), indent=1) if args.json else format_proof(result))
    if result.s3_error:
        print(f"warning: results were not stored in S3: {result.s3_error}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_PROOF_VIOLATION
