"""What the replay planner finds wrong, and the refusal that lists it.

Every stage of a replay (the request, the partitions on Kafka, each partition's range, the setup
before Spark) reports ``Problem``s rather than stopping at the first one: an on-call engineer who
mistyped a stream and a timestamp learns both at once. ``error`` problems refuse the whole replay
(``ReplayRefused``, a ``rewind.errors.Refused``: nothing was read or written); ``warning`` and
``info`` are notes that travel with the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rewind.errors import Refused

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Problem:
    """One finding of the planner; ``error`` refuses the plan, ``warning``/``info`` are notes."""

    kind: str
    message: str
    severity: Severity = "error"
    topic: str | None = None
    partition: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "topic": self.topic, "partition": self.partition}


class ReplayRefused(Refused, ValueError):
    """The replay cannot run as asked; the message lists every refusing problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = [p for p in problems if p.severity == "error"]
        if len(self.problems) == 1:  # one reason, one line
            super().__init__(f"replay refused: {self.problems[0].message}")
            return
        lines = [f"- {p.message}" for p in self.problems]
        super().__init__(f"replay refused ({len(self.problems)} problems):\n" + "\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (e.g. across Airflow task boundaries)
        return (type(self), (self.problems,))


def refuse(kind: str, message: str) -> ReplayRefused:
    """A refusal with one problem (raise it)."""
    return ReplayRefused([Problem(kind, message)])


def refuse_if_errors(problems: Iterable[Problem]) -> None:
    """Raise ``ReplayRefused`` when any of ``problems`` is an error (listing all of them)."""
    problems = list(problems)
    if any(p.severity == "error" for p in problems):
        raise ReplayRefused(problems)
