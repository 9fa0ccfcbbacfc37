"""When to restart a failed stream, and when to stop trying: Flink's restart strategies.

Pure: the supervisor keeps the failure history (a small JSON file beside the status) and
asks `decide` what to do. A *crash loop* is a run of failures that all end at the same last
committed batch: the same input keeps killing the job, so retrying forever would only hide
it. After `max_attempts` such failures the answer is "give up", leading with the exception's own
line (``rewind.supervision.causes.headline``), then the batch and its offsets, so a person looks;
no data is skipped to get past it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rewind.registry import RestartSpec, parse_duration
from rewind.supervision.causes import bounded, headline

#: Offsets of many partitions are cut to this many characters in a verdict (after its cause, never before).
OFFSETS_LIMIT = 1000
WHERE_IN_FULL = ("The whole error of each failure: the stream's failures (`rewind supervisor status STREAM --json`) "
                 "and the driver's log.")


@dataclass(frozen=True)
class Failure:
    at: float
    cause: str
    batch_id: int | None  # last committed batch when it failed
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    restart: bool
    delay_s: float
    attempt: int  # 1-based attempt number of this restart (or of the refused one)
    reason: str


def same_batch_run(history: list[Failure]) -> list[Failure]:
    """The trailing failures that share the newest failure's batch id (no progress between them)."""
    if not history:
        return []
    last = history[-1].batch_id
    run: list[Failure] = []
    for f in reversed(history):
        if f.batch_id != last:
            break
        run.append(f)
    return list(reversed(run))


def decide(spec: RestartSpec, history: list[Failure], now: float) -> Decision:
    """What to do after the newest failure in `history` (oldest first)."""
    if not history:
        return Decision(True, 0.0, 1, "first start")
    delay = parse_duration(spec.delay).total_seconds()
    max_delay = parse_duration(spec.max_delay).total_seconds()
    last = history[-1]
    loop = same_batch_run(history)
    if len(loop) > spec.max_attempts:  # every strategy: the same batch keeps failing
        return Decision(False, 0.0, len(loop), crash_loop_message(loop))
    if spec.strategy == "failure-rate":
        window = parse_duration(spec.failure_rate_interval).total_seconds()
        attempts = sum(1 for f in history if now - f.at <= window)
        if attempts > spec.max_attempts:
            return Decision(False, 0.0, attempts, f"{headline(last.detail)}: {attempts} failures within "
                                                  f"{spec.failure_rate_interval} (limit {spec.max_attempts}); last "
                                                  f"{last.cause} at batch {last.batch_id}, offsets "
                                                  f"{bounded(str(last.offsets), OFFSETS_LIMIT)}. {WHERE_IN_FULL}")
    else:
        attempts = len(loop)
        if spec.strategy == "exponential-backoff":
            # The first failure after progress is relaunched at once (Kubernetes' restart back-off does the
            # same): the delay only protects against a loop, and a loop has failed at least twice. Each
            # second of waiting is a second of the stream's output late after a lone crash.
            delay = 0.0 if attempts == 1 else min(max_delay, delay * 2 ** (attempts - 2))
    return Decision(True, delay, attempts, f"restart {attempts}/{spec.max_attempts} after {last.cause} "
                                           f"({spec.strategy}, {'at once' if delay == 0 else f'in {delay:.0f}s'})")


def crash_loop_message(loop: list[Failure]) -> str:
    last = loop[-1]
    nxt = "the first batch" if last.batch_id is None else f"batch {last.batch_id + 1}"
    starts = (f"starts at offsets {bounded(str(last.offsets), OFFSETS_LIMIT)}" if last.offsets
              else "starts where the last committed batch ended: its offsets were not recorded")
    return (f"crash loop: {headline(last.detail)} -- {len(loop)} failures in a row without committing past "
            f"batch {last.batch_id} (the next batch, {nxt}, {starts}; last cause {last.cause}). Nothing was "
            f"skipped: fix the cause (or the poison record) and clear the task to resume from the same offsets. "
            f"{WHERE_IN_FULL}")
