"""`rewind`: recovery and replay for PySpark streams that read Kafka.

One parser (each command group adds itself from its own module) and one mapping from errors to
exit codes, listed in every command's --help: 0 ok, 1 failed (tried and broke), 2 usage error,
3 refused (nothing was done), 4 proof violation. Errors are one line on stderr; --verbose adds
the trace.

A running embedded platform (``make up``, ``rewind services up``) is found here, once: its
``$REWIND_HOME/services/services.json`` is put into the environment where the environment says nothing
(``rewind.embedded.services.export_platform_env``), so every command, and every process a command starts,
reads Kafka and S3 from the environment alone, as they do in production.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from rewind import __version__
from rewind.errors import EXIT_CODES_HELP, EXIT_FAILED, RewindError, exit_code_of

log = logging.getLogger("rewind")

#: Every command group, in the order --help lists them.
COMMANDS = ("services", "produce", "stream", "verify", "checkpoint", "savepoint", "dq", "supervisor", "replay",
            "chaos", "spark", "up")


def build_parser() -> argparse.ArgumentParser:
    from importlib import import_module


    p = argparse.ArgumentParser(prog="rewind", description=__doc__.split("\n\n")[0],
                                epilog=EXIT_CODES_HELP + ". `rewind COMMAND --help` for each command.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logs, and the trace of an error")
    p.add_argument("--version", action="version", version=f"rewind {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in COMMANDS:
        import_module(f"rewind.cli.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "boto3", "urllib3", "py4j", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    load_embedded_platform()
    try:
        return int(args.func(args) or 0)
    except RewindError as exc:
        return _fail(args, exc, "refused" if not exc.retry and exc.exit_code == 3 else "error")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a library's error (Kafka, S3, SQL): one line, not a trace
        if not _is_client_error(exc):
            raise
        return _fail(args, exc, "error")


def load_embedded_platform() -> None:
    """The embedded platform's settings into the environment (see the module docstring); a file that cannot be
    read is said once and skipped: a command that needs Kafka or S3 then says which setting is missing."""
    from rewind.embedded.services import export_platform_env  # lazy: start-up of the CLI
    from rewind.settings import services_dir  # lazy: start-up of the CLI

    try:
        export_platform_env(services_dir())
    except (OSError, ValueError, TypeError) as exc:
        log.warning("the embedded platform's services.json under %s is unreadable (%s); ignored", services_dir(), exc)


def _fail(args: Any, exc: BaseException, word: str) -> int:
    if args.verbose:
        log.exception("%s failed", args.command)
    print(f"{word}: {exc}", file=sys.stderr)
    for note in getattr(exc, "__notes__", []):
        print(f"{word}: {note}", file=sys.stderr)
    return exit_code_of(exc) if isinstance(exc, RewindError) else EXIT_FAILED


def _is_client_error(exc: BaseException) -> bool:
    """Errors of the clients Rewind drives (Kafka, S3, SQL): answered in one line (exit 1)."""
    names = {f"{type(c).__module__}.{type(c).__name__}" for c in [exc]}
    prefixes = ("confluent_kafka.", "botocore.", "sqlalchemy.", "cimpl.")
    return any(n.startswith(prefixes) for n in names)


if __name__ == "__main__":
    sys.exit(main())
