"""`rewind stream run STREAM`: run a registered stream in the foreground (what spark-submit runs)."""

from __future__ import annotations

import argparse
from typing import Any

from rewind.cli.common import add_bootstrap, add_registry, command


def add_parser(sub: Any) -> None:
    st = command(sub, "stream", "run a registered stream in the foreground",
                 "run: Kafka -> the stream's transform -> its exactly-once sink, until SIGTERM/Ctrl-C (which stops "
                 "after the batch in flight) or, with --available-now, until what is in Kafka now is processed.",
                 codes={1: "failed: the query stopped with an exception (the status file and the log say which)",
                        3: "refused: an unknown stream, a missing topic, an unreachable Kafka, a driver already "
                           "holding the checkpoint, a missing connector jar"})
    st.add_argument("action", choices=["run"])
    st.add_argument("stream")
    add_registry(st)
    add_bootstrap(st)
    st.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry
    from rewind.settings import resolve_bootstrap
    from rewind.stream.runner import run_stream

    spec = load_registry(args.registry).get(args.stream)
    return run_stream(spec, resolve_bootstrap(args.bootstrap), available_now=args.available_now)
