"""Late records back: a replay that reprocesses a range's ``behind_watermark`` dead letters into the tables.

Why an explicit option: the live stream's verdict on a record behind the watermark is final for
the stream (its stateful operators dropped it; Rewind kept it as a dead letter instead of losing
it). Bringing it back changes results that were already emitted, so an operator asks for it:
``rewind replay run STREAM --from ... --to ... --reprocess-late``. The replay then

1. writes the rows the batch gives those records (a batch has no watermark: they are valid there),
   instead of leaving them out (``rewind.replay.chunks.keep_dead_letters_dead``);
2. recomputes every aggregate group they fall in from all its records, now counting them
   (``rewind.replay.recompute``: only the records still dead letters are left out);
3. deletes their dead letters (``rewind.sink.deletes``), last: each record then lands once, where
   it finally landed, and the proofs count it there. A replay that fails before this step leaves
   the record a row *and* a dead letter, which the proof names (``row+dead_letter``); running the
   replay again finishes it.

A sink that cannot delete (Delta) refuses the option before anything is written. A restore that
re-plans the batches that routed these records would route them again (the stream's own verdict).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from rewind.api.late import BEHIND_WATERMARK
from rewind.kafka.types import TP
from rewind.replay.problems import Problem
from rewind.sink.deletes import delete_keys
from rewind.sink.delta_target import is_delta_url
from rewind.sink.dialects import coordinates_in

Coord = tuple[str, int, int]


def late_refusals(setup: Any) -> list[Problem]:
    """Refuse ``--reprocess-late`` where the dead letters could not be retired (pure)."""

    if getattr(setup, "reprocess_late", False) and is_delta_url(setup.spec.sink.url):
        return [Problem("late_unsupported", "--reprocess-late deletes the records' dead letters once they are rows, "
                                            "and a Delta sink cannot delete rows yet; replay without it")]
    return []


def late_in_range(sink: Any, transform: Any, ranges: Mapping[TP, tuple[int, int]]) -> set[Coord]:
    """Coordinates of the range's records the stream routed as behind the watermark."""

    dead = sink.read_rows(transform.dead_letter_table, where=coordinates_in(dict(ranges)),
                          columns=["topic", "partition", "offset", "reason"])
    dead = dead[dead["reason"] == BEHIND_WATERMARK]
    return {(str(t), int(p), int(o)) for t, p, o in zip(dead["topic"], dead["partition"], dead["offset"])}


def retire_dead_letters(sink: Any, transform: Any, late: set[Coord], replay_id: str) -> int:
    """Delete the dead letters of the late records this replay made rows; returns how many."""

    keys = pd.DataFrame(sorted(late), columns=["topic", "partition", "offset"])
    return delete_keys(sink, transform.dead_letter_table, keys, label=f"replay {replay_id}: late records back")
