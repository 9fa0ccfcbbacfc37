"""spark-submit / python entry point for one replay (thin: rewind decides).

usage: replay.py STREAM (--plan-json FILE | --from X --to Y [--topics T] [--partitions P])
                 [--mode into-sink|shadow] [--replay-id ID] [--dry-run] [--json] [--registry FILE]
                 [--bootstrap HOST:PORT] [--run-dir DIR] [--no-s3]
Exit codes as `rewind replay run`: 0 ok, 1 runtime failure, 2 refused or proof failed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewind.cli.replay import job_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
