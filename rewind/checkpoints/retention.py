"""Which savepoints prune deletes: the retention rules, as pure functions over listings.

Keep the newest ``keep_last`` savepoints that are at most ``max_age`` old, and ALWAYS the newest
one (a stream must never be left without a way back because its last savepoint aged out).
Manifest-less leftovers are removed only once they are older than ``INCOMPLETE_AFTER``: a younger
one may be a copy still in progress, whose manifest is written last. ``apply_prune`` in
``rewind.checkpoints.savepoints`` carries a ``PrunePlan`` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from rewind.checkpoints.manifest import Incomplete, Listing, Manifest

#: A manifest-less savepoint younger than this may be a copy in progress: prune leaves it alone.
INCOMPLETE_AFTER = timedelta(hours=1)


class _Dated(Protocol):
    @property
    def created_at(self) -> datetime: ...


T = TypeVar("T", bound=_Dated)


def select_for_pruning(savepoints: Sequence[T], keep_last: int, max_age: timedelta, now: datetime) -> list[T]:
    """Pure retention: keep the newest ``keep_last`` that are at most ``max_age`` old, and always the
    newest one; return the rest, oldest first."""
    newest_first = sorted(savepoints, key=lambda s: s.created_at, reverse=True)
    drop = [s for i, s in enumerate(newest_first) if i > 0 and (i >= keep_last or now - s.created_at > max_age)]
    return drop[::-1]


def select_leftovers(incomplete: Sequence[Incomplete], older_than: timedelta, now: datetime) -> list[Incomplete]:
    """Pure: manifest-less leftovers old enough not to be a copy still in progress."""
    return [i for i in incomplete if now - i.newest > older_than]


@dataclass
class PrunePlan:
    """What a prune deletes and keeps (savepoints by manifest; leftovers without one)."""

    delete: list[Manifest]
    keep: list[Manifest]
    leftovers: list[Incomplete]
    young_leftovers: list[Incomplete]

    def to_json(self) -> dict[str, Any]:
        return {"delete": [m.savepoint_id for m in self.delete], "keep": [m.savepoint_id for m in self.keep],
                "leftovers": [i.savepoint_id for i in self.leftovers],
                "young_leftovers": [i.savepoint_id for i in self.young_leftovers]}


def plan_prune(listing: Listing, keep_last: int, max_age: timedelta, now: datetime,
               incomplete_after: timedelta = INCOMPLETE_AFTER) -> PrunePlan:
    """The retention rules applied to one stream's listing (see the module docstring)."""
    delete = select_for_pruning(listing.complete, keep_last, max_age, now)
    leftovers = select_leftovers(listing.incomplete, incomplete_after, now)
    return PrunePlan(delete, [m for m in listing.complete if m not in delete], leftovers,
                     [i for i in listing.incomplete if i not in leftovers])
