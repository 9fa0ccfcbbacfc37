"""Which proof a stream gets: its ``dq_suite``, unless that is the demo's suite on a stream it cannot read.

``dq_suite: exactly_once``, the registry's default, is the demo's own suite: it reads the demo's tables
(``events``, ``dead_letter``, ``window_results``). A stream written from docs/add-your-stream.md that
leaves ``dq_suite`` out has other tables, and ``rewind verify`` died on the first one it lacked (a
traceback, not a verdict). Such a stream gets the contract proof, which any stream's declarations drive;
the demo and streams shaped like it keep theirs.
"""

from __future__ import annotations

from typing import Any

from rewind.api.contract import load_transform
from rewind.proof.checks import CONTRACT_SUITE, SUITE

__all__ = ["DEMO_TABLES", "suite_of"]

#: The tables the demo's suite reads.
DEMO_TABLES = frozenset({"events", "dead_letter", "window_results"})


def suite_of(spec: Any, transform: Any = None) -> str:
    """The suite that proves ``spec``'s stream (``transform``: its loaded transform, else loaded here)."""
    if spec.dq_suite != SUITE:
        return str(spec.dq_suite)
    tables = {t.name for t in (transform if transform is not None else load_transform(spec)).tables}
    return SUITE if DEMO_TABLES <= tables else CONTRACT_SUITE
