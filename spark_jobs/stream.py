"""spark-submit entry point of one registered stream (thin: ``rewind stream run`` decides).

usage: stream.py STREAM [--registry FILE] [--bootstrap HOST:PORT] [--available-now]
"""

import sys

from rewind.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["stream", "run", *sys.argv[1:]]))
