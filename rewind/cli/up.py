"""`rewind up`: what `make up` runs: the embedded platform, Airflow, the demo producer; Ctrl-C stops all."""

from __future__ import annotations

import argparse
from typing import Any

from rewind.cli.common import add_registry, command


def add_parser(sub: Any) -> None:
    up = command(sub, "up", "start the embedded platform, Airflow (which runs the demo stream) and the demo "
                            "producer; Ctrl-C stops everything it started")
    add_registry(up)
    up.add_argument("--stream", default="demo")
    up.add_argument("--rate", type=float, default=200.0, help="demo producer events/s")
    up.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.embedded.up import run_up  # lazy: start-up of the CLI
    from rewind.settings import rewind_home  # lazy: start-up of the CLI

    return run_up(rewind_home(), args.registry, args.stream, rate=args.rate)
