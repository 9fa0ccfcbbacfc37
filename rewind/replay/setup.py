"""A validated replay: what it reads, in which chunks, with which options, where it writes.

``prepare_replay`` checks everything that needs neither Spark nor the sink (the mode, the replay
id, a plan of this stream without errors and with records to replay) and returns a
``ReplaySetup``; a refusal here (``ReplayRefused``) means nothing was read or written.
``plan_chunks`` is the pure decision the Spark job works from (its read options are
``rewind.driver.source.bounded_options``, shared with a standby's warm-up).

Why a module of its own: both the orchestration (``rewind.replay.run``) and the Spark work
(``rewind.replay.job``) need the setup; with it here, the arrows go one way: run -> job -> setup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.kafka.types import TP
from rewind.paths import paths_of
from rewind.replay.guard import check_mode, check_replay_id, new_replay_id, shadow_prefix
from rewind.replay.plan import ReplayPlan
from rewind.replay.problems import ReplayRefused, refuse

DEFAULT_CHUNK_OFFSETS = 200_000
Ranges = dict[TP, tuple[int, int]]


def plan_chunks(ranges: Mapping[TP, tuple[int, int]], chunk_offsets: int) -> list[Ranges]:
    """Split ``[start, end)`` per partition into chunks of at most ~``chunk_offsets`` offsets in all.

    Every chunk covers every partition (a proportional slice, possibly empty), so each Spark job
    reads all partitions in parallel and the chunks tile the range exactly, without overlap.
    """
    if chunk_offsets < 1:
        raise ValueError(f"chunk_offsets must be >= 1, not {chunk_offsets}")
    total = sum(max(0, e - s) for s, e in ranges.values())
    n = max(1, math.ceil(total / chunk_offsets))
    return [{tp: (s + (e - s) * i // n, s + (e - s) * (i + 1) // n) for tp, (s, e) in sorted(ranges.items())}
            for i in range(n)]


@dataclass(frozen=True)
class ReplaySetup:
    """A validated replay: what it reads, where it writes, where its report goes."""

    spec: Any
    plan: ReplayPlan
    mode: str
    replay_id: str
    table_prefix: str         # the prefix of the tables written (the stream's, or the shadow one)
    run_dir: Path
    reprocess_late: bool = False  # bring the range's behind_watermark dead letters back (rewind.replay.late)

    @property
    def ranges(self) -> Ranges:
        return {p.tp: (p.start, p.end) for p in self.plan.partitions}

    @property
    def bounds(self) -> dict[str, dict[str, list[int]]]:
        out: dict[str, dict[str, list[int]]] = {}
        for p in self.plan.partitions:
            out.setdefault(p.topic, {})[str(p.partition)] = [p.start, p.end]
        return out

    @property
    def target_spec(self) -> Any:
        """The spec whose sink the replay writes (shadow: the same stream with the shadow prefix)."""
        if self.table_prefix == self.spec.sink.table_prefix:
            return self.spec
        return self.spec.model_copy(update={"sink": self.spec.sink.model_copy(
            update={"table_prefix": self.table_prefix})})


def default_run_dir(spec: Any, replay_id: str) -> Path:
    """``<home>/replays/STREAM/ID`` (``rewind.paths``): where the DAG's replays go too."""

    return paths_of(spec).replay_run(replay_id)


def prepare_replay(spec: Any, plan: ReplayPlan, *, mode: str = "into-sink", replay_id: str | None = None,
                   run_dir: str | Path | None = None, reprocess_late: bool = False) -> ReplaySetup:
    """Validate everything that needs neither Spark nor the sink; raise ReplayRefused otherwise."""
    check_mode(mode)
    replay_id = check_replay_id(replay_id) if replay_id is not None else new_replay_id()
    if plan.stream != spec.name:
        raise refuse("plan_mismatch", f"the plan is for stream {plan.stream!r}, not {spec.name!r}; plan again "
                                      f"for {spec.name!r}")
    errors = [p for p in plan.problems if p.severity == "error"]
    if errors:
        raise ReplayRefused(errors)
    if not plan.partitions or plan.total_offsets == 0 or plan.total_records == 0:
        ranges = ", ".join(f"{p.topic}[{p.partition}] [{p.start}, {p.end})" for p in plan.partitions) or "none"
        raise refuse("nothing_to_replay", f"nothing to replay: the plan from {plan.start} to {plan.end} holds no data "
                                          f"records (ranges: {ranges}); check --from/--to (--to is exclusive) and "
                                          "--partitions with `rewind replay plan`")
    prefix = spec.sink.table_prefix if mode == "into-sink" else shadow_prefix(spec.sink.table_prefix, replay_id)
    return ReplaySetup(spec, plan, mode, replay_id, prefix,
                       Path(run_dir) if run_dir else default_run_dir(spec, replay_id), reprocess_late)
