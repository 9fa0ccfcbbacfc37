"""spark-submit entry point of one replay (thin: ``rewind.cli.replay.job_main`` decides).

usage: replay.py STREAM (--plan-json FILE | --from X --to Y [--topics T] [--partitions P])
                 [--mode into-sink|shadow] [--replay-id ID] [--dry-run] [--json] [--registry FILE]
                 [--bootstrap HOST:PORT] [--run-dir DIR] [--no-s3]
Exit codes as `rewind replay run`.
"""

import sys

from rewind.cli.replay import job_main

if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
