"""The replay itself: a bounded Spark batch job over a planned Kafka range, written idempotently.

``run_replay`` executes a ``rewind.replay.plan.ReplayPlan``: it reads exactly the plan's
``[start, end)`` per partition with the stream's own source format, applies the stream's own
transform (``load_entry_point(spec.transform)``: the same code, not a copy), splits the rows
with the transform's tables module and writes them through the stream's sink with
``write_rows`` -- the idempotent path without the ledger, because a replay's rows may overlap
what the live stream writes at the same moment (events are insert-or-ignore by event_id, dead
letters by coordinates). Window results are recomputed from the raw events afterwards
(``rewind.replay.windows`` says which and why). Then the DQ proof runs over the range.

Why chunks: the range is split into chunks of at most ``chunk_offsets`` offsets (every
partition advances in proportion), each one Spark job whose source rows are cached once
(the transform reads them three times: dead letters, events, windows), collected, written in
one sink transaction and dropped. Memory stays bounded whatever the range; progress moves per
chunk; a failure leaves whole chunks written, and running the replay again is harmless.

This module holds the pure decisions (chunks, options, validation, the dry run) and the
orchestration (lock, report, proof verdict); ``rewind.replay.job`` does the Spark work.

Refusals (``ReplayRefused``, before any Spark job): an unknown mode, a bad replay id, a plan of
another stream or with errors, an empty plan ("nothing to replay": an empty range is almost
always a wrong --from/--to, so it is refused rather than reported as a success), and a replay
of the same stream already running (``ReplayBusy``, from the lock in ``rewind.replay.guard``).
Runtime failures raise ``ReplayFailed``; a failing proof raises ``ReplayProofFailed``; both
carry the report, which is stored either way.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from rewind.kafka.offsets import TP
from rewind.replay.guard import (acquire_lock, check_mode, check_replay_id, current_holder, new_replay_id, refuse,
                                 shadow_prefix)
from rewind.replay.plan import ReplayPlan, ReplayRefused, format_plan
from rewind.replay.report import ReplayFailed, ReplayProofFailed, ReplayReport, format_report, store_report

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CHUNK_OFFSETS", "ReplaySetup", "batch_options", "describe_replay", "plan_chunks",
           "prepare_replay", "run_replay"]

DEFAULT_CHUNK_OFFSETS = 200_000
#: Tables the replay recomputes instead of writing the transform's rows (see rewind.replay.windows).
RECOMPUTED = "window_results"
#: Source options that position or pace a stream; a replay's range replaces them.
_POSITION_KEYS = ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
                  "startingoffsetsbytimestampstrategy", "endingoffsets", "endingtimestamp",
                  "endingoffsetsbytimestamp", "maxoffsetspertrigger")
Ranges = dict[TP, tuple[int, int]]


# ---------------------------------------------------------------------------------------------
# Pure decisions
# ---------------------------------------------------------------------------------------------


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


def batch_options(spec: Any, bootstrap: str, topics: list[str]) -> dict[str, str]:
    """The stream's own source options for a bounded batch read of ``topics`` (its positioning and
    pacing options dropped: the chunk's startingOffsets/endingOffsets replace them)."""
    from rewind.stream.runner import source_options

    opts = {k: v for k, v in source_options(spec, bootstrap).items() if k.lower() not in _POSITION_KEYS}
    opts["subscribe"] = ",".join(topics)
    return opts


@dataclass(frozen=True)
class ReplaySetup:
    """A validated replay: what it reads, where it writes, where its report goes."""

    spec: Any
    plan: ReplayPlan
    mode: str
    replay_id: str
    table_prefix: str         # the prefix of the tables written (the stream's, or the shadow one)
    run_dir: Path

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


def default_run_dir(stream: str, replay_id: str) -> Path:
    from rewind.settings import rewind_home

    return rewind_home() / "replays" / stream / replay_id


def prepare_replay(spec: Any, plan: ReplayPlan, *, mode: str = "into-sink", replay_id: str | None = None,
                   run_dir: str | Path | None = None) -> ReplaySetup:
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
                       Path(run_dir) if run_dir else default_run_dir(spec.name, replay_id))


def describe_replay(setup: ReplaySetup, s3_where: str | None = None,
                    chunk_offsets: int = DEFAULT_CHUNK_OFFSETS) -> str:
    """The dry run: the plan, and what a run would write where (nothing is changed)."""
    from rewind.replay.report import s3_key

    spec = setup.spec
    tables = ", ".join(f"{setup.table_prefix}{t}" for t in ("events", "dead_letter", "window_results"))
    what = ("into the stream's own tables, idempotently (events insert-or-ignore by event_id, dead letters by "
            "topic/partition/offset; window results recomputed from the raw events)" if setup.mode == "into-sink"
            else "into shadow tables for comparison with the main tables (which stay untouched)")
    n_chunks = len(plan_chunks(setup.ranges, chunk_offsets))
    text = format_plan(setup.plan).rsplit("\n", 1)[0]
    lines = [text, f"replay {setup.replay_id} ({setup.mode}) would write {what}:",
             f"  sink {spec.sink.url.split('@')[-1]} tables {tables}",
             f"  in {n_chunks} chunk(s) of at most {chunk_offsets:,} offsets, then run the DQ proof "
             "over the range",
             f"  report: {setup.run_dir / 'report.json'}"
             + (f" and {s3_where.rstrip('/')}/{s3_key(spec.name, setup.replay_id)}" if s3_where else "")]
    holder = current_holder(spec.status_dir, spec.name)
    if holder:
        lines.append(f"  note: replay {holder.get('replay_id')!r} of this stream is running now (pid "
                     f"{holder.get('pid')}, since {holder.get('started_at')}): a run would be refused until it ends")
    lines.append("(dry run: nothing was written or changed)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The run (the edge: Kafka, Spark, the sink, S3)
# ---------------------------------------------------------------------------------------------


def run_replay(spec: Any, plan: ReplayPlan, bootstrap: str, *, mode: str = "into-sink",
               replay_id: str | None = None, spark: Any = None, run_dir: str | Path | None = None,
               s3: Any = None, progress: bool = True, chunk_offsets: int = DEFAULT_CHUNK_OFFSETS,
               prove: bool = True) -> ReplayReport:
    """Replay ``plan`` for ``spec``'s stream; returns the (stored) report when the proof passes.

    Raises ReplayRefused (input, nothing to replay, another replay running) before any Spark job,
    ReplayFailed on a runtime error and ReplayProofFailed when the proof fails; the report is stored
    in ``run_dir`` (default ``$REWIND_HOME/replays/STREAM/REPLAY_ID``) and, given ``s3`` (an
    ``S3Store`` or ``S3Config``), at ``replays/STREAM/REPLAY_ID/report.json`` in every case but a
    refusal. ``spark``: a session to use (else one is built and stopped here). ``prove=False``
    skips the proof (benchmarks only; the report says so).
    """
    if chunk_offsets < 1:
        raise refuse("bad_chunk_size", f"chunk_offsets must be >= 1, not {chunk_offsets}")
    setup = prepare_replay(spec, plan, mode=mode, replay_id=replay_id, run_dir=run_dir)
    lock = acquire_lock(spec.status_dir, spec.name, setup.replay_id, setup.bounds, mode)
    started = time.perf_counter()
    report = ReplayReport(setup.replay_id, spec.name, mode, "running", _now(), plan.to_json(),
                          {"url": spec.sink.url.split("@")[-1], "table_prefix": setup.table_prefix,
                           "tables": {}})
    if plan.missing:
        report.notes.append(f"{plan.missing} offsets of the requested range were beyond retention and could not "
                            "be replayed (--allow-beyond-retention); see the plan's problems")
    own_spark = False
    try:
        if spark is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()  # a caller's session (e.g. an Airflow worker's) is kept
            if spark is None:
                from rewind.stream.spark_session import build_session

                spark = build_session(f"rewind-replay-{spec.name}", conf={"spark.ui.showConsoleProgress": "false"})
                own_spark = True
        from rewind.replay.job import execute, prove_range

        execute(setup, bootstrap, spark, report, progress=progress, chunk_offsets=chunk_offsets)
        report.seconds["replay"] = round(time.perf_counter() - started, 3)
        report.throughput = {"records_per_s": round(report.counts["records_read"] / max(report.seconds["replay"],
                                                                                         1e-9), 1)}
        if prove:
            prove_range(setup, bootstrap, report, s3)
        else:
            report.notes.append("the DQ proof was skipped (prove=False)")
        report.status = "ok" if report.proof is None or report.proof["ok"] else "proof_failed"
    except Exception as exc:
        report.status, report.error = "failed", f"{type(exc).__name__}: {exc}"
        _finish(report, started, setup.run_dir, s3)
        log.error("replay %s failed: %s (report %s)", setup.replay_id, exc, report.artifacts.get("report"))
        raise ReplayFailed(f"replay {setup.replay_id} of {spec.name} failed: {report.error}; nothing is half "
                           "written within a chunk, and running it again is safe (writes are idempotent); report: "
                           f"{report.artifacts.get('report')}", report) from exc
    finally:
        lock.release()
        if own_spark and spark is not None:
            spark.stop()
    _finish(report, started, setup.run_dir, s3)
    if report.status == "proof_failed":
        raise ReplayProofFailed(format_report(report), report)
    return report


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _finish(report: ReplayReport, started: float, run_dir: Path, s3: Any) -> None:
    report.finished_at = _now()
    report.seconds["total"] = round(time.perf_counter() - started, 3)
    store_report(report, run_dir, s3)
