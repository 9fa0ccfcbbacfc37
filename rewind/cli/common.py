"""What every command shares: its parser with the exit codes in its --help, and the registry/Kafka options."""

from __future__ import annotations

import argparse
from typing import Any

from rewind.errors import EXIT_FAILED, EXIT_OK, EXIT_PROOF_VIOLATION, EXIT_REFUSED, EXIT_USAGE

#: The meaning of each exit code, as every command's --help lists it (a command adds its own words).
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_FAILED: "failed: the work started and broke; the message says what was left as it was (a retry may help)",
    EXIT_USAGE: "usage error: the command line could not be parsed",
    EXIT_REFUSED: "refused: bad input or an unsafe situation; nothing was done",
    EXIT_PROOF_VIOLATION: "proof violation: the data disproves a guarantee (the report says which and where)",
}


def command(sub: Any, name: str, help: str, description: str = "", codes: dict[int, str] | None = None,
            **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with its exit codes (``codes`` overrides the words of some)."""
    meanings = {**EXIT_MEANINGS, **(codes or {})}
    epilog = "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in sorted(meanings.items()))
    return sub.add_parser(name, help=help, description=description or help, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def add_registry(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", help="the stream registry (default: $REWIND_REGISTRY, else streams.yaml)")


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="Kafka (default: $REWIND_KAFKA_BOOTSTRAP, else the embedded platform's)")
