"""`rewind stream run STREAM`: run a registered stream in the foreground (what spark-submit runs).
`rewind stream stop STREAM`: stop its driver (and standby), on whatever host they run.
`rewind stream new NAME`: write a new stream's package and add it to the registry.
`rewind stream upgrade NAME`: change its registry entry safely (``rewind.cli.upgrade``)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rewind.cli import upgrade
from rewind.cli.common import add_bootstrap, add_registry, command
from rewind.cli.scaffold import ScaffoldRefused, add_to_registry, next_commands, package_files
from rewind.errors import Refused, exit_code_of


def add_parser(sub: Any) -> None:
    st = command(sub, "stream", "run a registered stream, or start a new one",
                 "run: Kafka -> the stream's transform -> its exactly-once sink. new: a new stream's package (a "
                 "transform implementing the contract, a producer, a test) and its registry entry. upgrade: a new "
                 "registry entry, checked first, with a rollback. "
                 "`rewind stream ACTION --help` for each.")
    actions = st.add_subparsers(dest="stream_action", required=True, metavar="ACTION", title="actions")
    run_p = command(actions, "run", "run a registered stream in the foreground",
                    "Kafka -> the stream's transform -> its exactly-once sink, until SIGTERM/Ctrl-C (which stops "
                    "after the batch in flight) or, with --available-now, until what is in Kafka now is processed.",
                    codes={1: "failed: the query stopped with an exception (the status and the log say which)",
                           3: "refused: an unknown stream, a missing topic, an unreachable Kafka, another driver of "
                              "the stream holding its lease after 60 s (its host, pid, epoch and the lease's expiry "
                              "are named), a missing connector jar; or this driver was fenced: its lease was taken "
                              "over while it was paused (it committed nothing since)"})
    run_p.add_argument("stream")
    add_registry(run_p)
    add_bootstrap(run_p)
    run_p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run_p.add_argument("--standby", action="store_true",
                       help="a warm standby: start and warm Spark now, wait for the stream's driver lease (released, "
                            "lapsed, or its process gone on this host), then take over from the checkpoint; its "
                            "notice in the stream's control store says when it is ready")
    run_p.set_defaults(func=run)

    stop_p = command(actions, "stop", "stop the stream's driver (and standby), on whatever host they run",
                     "Asks through the stream's control store (and with SIGTERM where the driver runs on this host): "
                     "the driver stops after its batch in flight and releases its lease. A supervisor that watches "
                     "the stream relaunches it: pause its DAG first to keep the stream stopped.",
                     codes={1: "failed: the driver still held its lease after --timeout seconds"})
    stop_p.add_argument("stream")
    add_registry(stop_p)
    stop_p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the lease (default 120)")
    stop_p.set_defaults(func=stop)

    new_p = command(actions, "new", "write a new stream's package and add it to the registry",
                    "Writes DIR/NAME/: transform.py (a class implementing rewind.api.contract.Transform for JSON "
                    "records {id, value, ts}: from_json in Spark, malformed records as dead letters, an insert-once "
                    "table NAME_rows, expect() recomputing it in pandas), producer.py (test records), test_NAME.py; "
                    "appends the stream to the registry (its comments kept; dq_suite: contract) and prints the next "
                    "commands. See docs/add-your-stream.md.",
                    codes={3: "refused: a NAME that is not a lowercase identifier, DIR/NAME exists, the stream name "
                              "is taken in the registry, or the registry cannot be appended to; nothing was written"})
    new_p.add_argument("name", metavar="NAME", help="the stream's name, also its package's (a lowercase identifier)")
    new_p.add_argument("--dir", default=".", help="where the package NAME/ goes (default: the current directory)")
    new_p.add_argument("--registry", help="the registry to add the stream to (default: $REWIND_REGISTRY, else "
                                          "streams.yaml); created if missing")
    new_p.add_argument("--topic", help="the Kafka topic it reads (default: NAME)")
    new_p.add_argument("--partitions", type=int, default=3, metavar="N",
                       help="the topic's partitions, when the producer creates it (default: 3)")
    new_p.set_defaults(func=new)


    upgrade.add_parser(actions)


def run(args: argparse.Namespace) -> int:
    from rewind.driver.driver import run_stream  # lazy: start-up of the CLI
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.settings import resolve_bootstrap  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    try:
        code = run_stream(spec, resolve_bootstrap(args.bootstrap), available_now=args.available_now,
                          standby=args.standby)
    except BaseException as exc:
        _exit_anyway(exit_code_of(exc))
        raise
    _exit_anyway(code)
    return code


def _exit_anyway(code: int, after_s: float = 30.0) -> None:
    """A driver ends with its JVM: should the interpreter's exit then wait on a thread the JVM's
    gateway still holds, the process ends anyway (with ``code``), releasing its host's resources."""
    import threading

    timer = threading.Timer(after_s, os._exit, [code])
    timer.daemon = True
    timer.start()


def stop(args: argparse.Namespace) -> int:
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.supervision.process_control import stop_stream  # lazy: start-up of the CLI

    spec = load_registry(args.registry).get(args.stream)
    print(f"{spec.name}: stopped" if stop_stream(spec, args.timeout) else f"{spec.name}: no driver was running")
    return 0


def new(args: argparse.Namespace) -> int:
    """Check everything first (a refusal writes nothing), then the package, then the registry."""
    from rewind.registry import load_registry  # lazy: start-up of the CLI
    from rewind.settings import default_registry  # lazy: start-up of the CLI

    files = package_files(args.name, args.topic, args.partitions)
    directory = Path(args.dir).resolve()
    package = directory / args.name
    if package.exists():
        raise ScaffoldRefused(f"{package} already exists: choose another NAME or --dir (nothing was written)")
    registry = Path(args.registry) if args.registry else default_registry()
    try:
        before = registry.read_text() if registry.exists() else ""
    except OSError as exc:
        raise ScaffoldRefused(f"cannot read the registry {registry}: {exc} (nothing was written)")
    probe = registry if registry.exists() else next(p for p in registry.resolve().parents if p.exists())
    if not os.access(probe, os.W_OK):
        raise ScaffoldRefused(f"cannot write the registry {registry} (nothing was written)")
    text = add_to_registry(before, args.name, args.topic, args.partitions, str(directory), where=str(registry))
    with tempfile.TemporaryDirectory() as tmp:  # the new entry alone must load (durations, schedule, names)
        alone = Path(tmp) / "streams.yaml"
        alone.write_text(add_to_registry("", args.name, args.topic, args.partitions, str(directory)))
        load_registry(alone)

    package.mkdir(parents=True)
    for rel, body in files.items():
        (directory / rel).write_text(body)
        print(f"wrote {directory / rel}")
    target = registry.resolve()  # a symlinked registry stays a symlink
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    if target.exists():
        shutil.copymode(target, partial)
    partial.replace(target)  # whole or not at all: a reader never sees half an entry
    print(f"added stream {args.name} to {registry} (dq_suite: contract)")
    print("next: send test records, run the stream over them, prove the sink holds exactly what Kafka does:")
    for line in next_commands(args.name, directory, _registry_flag(args.registry, registry)):
        print(f"  {line}")
    print(f"then change the places marked CHANGE in {package / 'transform.py'} (and test: pytest {package})")
    return 0


def _registry_flag(given: str | None, registry: Path) -> Path | None:
    """The registry the next commands must name (--registry), or None when it is the default one."""
    from rewind.settings import default_registry  # lazy: start-up of the CLI

    if not given:
        return None
    try:
        return None if default_registry().resolve() == registry.resolve() else registry.resolve()
    except Refused:
        return registry.resolve()
