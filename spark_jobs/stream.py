"""spark-submit / python entry point for one registered stream (thin: rewind decides)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewind.cli.main import main  # noqa: E402

if __name__ == "__main__":
    # usage: stream.py STREAM [--registry FILE] [--bootstrap HOST:PORT] [--available-now]
    sys.exit(main(["stream", "run", *sys.argv[1:]]))
