"""The replay itself: a bounded Spark batch job over a planned Kafka range, written idempotently.

``run_replay`` executes a ``rewind.replay.plan.ReplayPlan``: it reads exactly the plan's
``[start, end)`` per partition with the stream's own source format, applies the stream's own
transform (``rewind.api.contract.load_transform``: the same class, not a copy), splits the rows
with the transform's tables module and writes them through the stream's sink with
``write_rows`` -- the idempotent path without the ledger, because a replay's rows may overlap
what the live stream writes at the same moment (events are insert-or-ignore by event_id, dead
letters by coordinates). The transform's aggregate rows are never written: each aggregate group
the range touches is recomputed afterwards from ALL its records (every partition, its whole
window), or left alone and reported (``rewind.replay.aggregates`` says which and why); a replay
that could not keep an aggregate whole is refused before anything is written. Then the DQ proof
runs over the range, aggregates judged by value.

Why chunks: the range is split into chunks of at most ``chunk_offsets`` offsets (every
partition advances in proportion), each one Spark job (the transform's, reading its range once
where its plan shares the parse across branches), collected, written in one sink transaction and
dropped. Memory stays bounded whatever the range; progress moves per
chunk; a failure leaves whole chunks written, and running the replay again is harmless.

The pure decisions (chunks, options) and the validation before anything runs are
``rewind.replay.setup``'s; this module holds the dry run and the orchestration (lock, report,
proof verdict); ``rewind.replay.job`` does the Spark work.

Refusals (``ReplayRefused``, before any Spark job): an unknown mode, a bad replay id, a plan of
another stream or with errors, an empty plan ("nothing to replay": an empty range is almost
always a wrong --from/--to, so it is refused rather than reported as a success), a ``replace``
table not declared an aggregate or an aggregate no bounded range can recompute
(``rewind.replay.aggregates.refusals``), and a replay of the same stream already running
(``ReplayBusy``, from the lock in ``rewind.replay.guard``).
Runtime failures raise ``ReplayFailed``; a failing proof raises ``ReplayProofFailed``; both
carry the report, which is stored either way.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewind.api.contract import load_transform
from rewind.assets.cursor import record_replay
from rewind.control.location import control_store
from rewind.driver.spark_session import build_session
from rewind.lineage.config import Lineage
from rewind.lineage.entry import replay_lineage
from rewind.replay.guard import acquire_lock, current_holder
from rewind.replay.job import check_before_writing, execute, prove_range
from rewind.replay.plan import ReplayPlan, format_plan
from rewind.replay.problems import refuse
from rewind.replay.report import ReplayFailed, ReplayProofFailed, ReplayReport, format_report, s3_key, store_report
from rewind.replay.setup import DEFAULT_CHUNK_OFFSETS, ReplaySetup, plan_chunks, prepare_replay

log = logging.getLogger(__name__)

__all__ = ["describe_replay", "run_replay"]


def describe_replay(setup: ReplaySetup, s3_where: str | None = None,
                    chunk_offsets: int = DEFAULT_CHUNK_OFFSETS) -> str:
    """The dry run: the plan, and what a run would write where (nothing is changed)."""
    spec = setup.spec

    transform = load_transform(spec)
    specs = list(transform.tables)
    aggregated = {a.table for a in transform.aggregates}
    tables = ", ".join(f"{setup.table_prefix}{t.name}" for t in specs)
    rule = {"ignore": "insert-or-ignore", "replace": "upsert", "latest": "highest version wins"}
    whole = "each touched group recomputed from all its records"
    how = "; ".join(f"{t.name}: {whole if t.name in aggregated else rule[t.on_conflict]} by {'/'.join(t.key)}"
                    for t in specs)
    what = (f"into the stream's own tables, idempotently ({how})" if setup.mode == "into-sink"
            else "into shadow tables for comparison with the main tables (which stay untouched)")
    n_chunks = len(plan_chunks(setup.ranges, chunk_offsets))
    text = format_plan(setup.plan).rsplit("\n", 1)[0]
    lines = [text, f"replay {setup.replay_id} ({setup.mode}) would write {what}:",
             f"  sink {spec.sink.url.split('@')[-1]} tables {tables}",
             f"  in {n_chunks} chunk(s) of at most {chunk_offsets:,} offsets, then run the DQ proof "
             "over the range",
             f"  report: {setup.run_dir / 'report.json'}"
             + (f" and {s3_where.rstrip('/')}/{s3_key(spec.name, setup.replay_id)}" if s3_where else "")]
    holder = current_holder(control_store(spec), spec.name)
    if holder:
        lines.append(f"  note: replay {holder.get('replay_id')!r} of this stream is running now (pid "
                     f"{holder.get('pid')}, since {holder.get('started_at')}): a run would be refused until it ends")
    if setup.reprocess_late:
        lines.append("  late records: the range's behind_watermark dead letters become rows (their aggregates "
                     "recomputed whole), then their dead letters are deleted")
    lines.append("(dry run: nothing was written or changed)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The run (the edge: Kafka, Spark, the sink, S3)
# ---------------------------------------------------------------------------------------------


def run_replay(spec: Any, plan: ReplayPlan, bootstrap: str, *, mode: str = "into-sink",
               replay_id: str | None = None, spark: Any = None, run_dir: str | Path | None = None,
               s3: Any = None, progress: bool = True, chunk_offsets: int = DEFAULT_CHUNK_OFFSETS,
               prove: bool = True, reprocess_late: bool = False) -> ReplayReport:
    """Replay ``plan`` for ``spec``'s stream; returns the (stored) report when the proof passes.

    Raises ReplayRefused (input, nothing to replay, another replay running) before any Spark job,
    ReplayFailed on a runtime error and ReplayProofFailed when the proof fails; the report is stored
    in ``run_dir`` (default ``$REWIND_HOME/replays/STREAM/REPLAY_ID``) and, given ``s3`` (an
    ``S3Storage`` or ``S3Config``), at ``replays/STREAM/REPLAY_ID/report.json`` in every case but a
    refusal. ``spark``: a session to use (else one is built and stopped here). ``prove=False``
    skips the proof (benchmarks only; the report says so). ``reprocess_late``: bring the range's
    ``behind_watermark`` dead letters back into the tables (``rewind.replay.late``).
    """
    if chunk_offsets < 1:
        raise refuse("bad_chunk_size", f"chunk_offsets must be >= 1, not {chunk_offsets}")
    setup = prepare_replay(spec, plan, mode=mode, replay_id=replay_id, run_dir=run_dir, reprocess_late=reprocess_late)
    lock = acquire_lock(control_store(spec), spec.name, setup.replay_id, setup.bounds, mode)
    try:
        check_before_writing(setup, bootstrap)  # aggregates it could not keep whole: refused, nothing written
    except BaseException:
        lock.release()
        raise
    started = time.perf_counter()
    report = ReplayReport(setup.replay_id, spec.name, mode, "running", _now(), plan.to_json(),
                          {"url": spec.sink.url.split("@")[-1], "table_prefix": setup.table_prefix,
                           "tables": {}})
    if plan.missing:
        report.notes.append(f"{plan.missing} offsets of the requested range were beyond retention and could not "
                            "be replayed (--allow-beyond-retention); see the plan's problems")
    own_spark = False
    lineage = Lineage()
    try:
        if spark is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()  # a caller's session (e.g. an Airflow worker's) is kept
            if spark is None:

                spark = build_session(f"rewind-replay-{spec.name}",
                                      conf={"spark.ui.showConsoleProgress": "false", **spec.spark_conf}, sources=False)
                own_spark = True
        lineage = replay_lineage(spec, setup.target_spec, bootstrap, spark, setup.replay_id)
        lineage.outputs(load_transform(spec).tables)
        lineage.start()
        execute(setup, bootstrap, spark, report, progress=progress, chunk_offsets=chunk_offsets)
        report.seconds["replay"] = round(time.perf_counter() - started, 3)
        report.throughput = {"records_per_s": round(report.counts["records_read"] / max(report.seconds["replay"],
                                                                                         1e-9), 1)}
        if prove:
            prove_range(setup, bootstrap, report, s3)
        else:
            report.notes.append("the DQ proof was skipped (prove=False)")
        report.status = "ok" if report.proof is None or report.proof["ok"] else "proof_failed"
        _lineage_end(lineage, plan, report)
        if mode == "into-sink" and report.status == "ok":
            _announce(spec, plan, report)
    except Exception as exc:
        report.status, report.error = "failed", f"{type(exc).__name__}: {exc}"
        _lineage_end(lineage, plan, report, exc)
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


def _lineage_end(lineage: Lineage, plan: ReplayPlan, report: ReplayReport, error: Exception | None = None) -> None:
    """The replay's final OpenLineage event (``rewind.lineage``): rows read per topic (one topic: the records
    read; several: the plan's counts), written per table; FAIL on an error or a failed proof."""
    topics = sorted({p.topic for p in plan.partitions})
    read = {topics[0]: int(report.counts.get("records_read", 0))} if len(topics) == 1 else \
        {t: sum(p.records for p in plan.partitions if p.topic == t) for t in topics}
    lineage.read(read)
    lineage.rows(-1, dict(report.counts.get("written", {})))
    if error is None and report.status == "ok":
        lineage.finish("COMPLETE")
    else:
        lineage.finish("FAIL", error or "the DQ proof over the replayed range failed")


def _announce(spec: Any, plan: ReplayPlan, report: ReplayReport) -> None:
    """Note the rewritten range for the tables' Asset watchers (``rewind.assets``), which announce it once."""
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for p in plan.partitions:
        starts.setdefault(p.topic, {})[str(p.partition)] = p.start
        ends.setdefault(p.topic, {})[str(p.partition)] = p.end
    written = {k: int(v) for k, v in dict(report.counts.get("written", {})).items()}
    tables = sorted(t.name for t in load_transform(spec).tables)
    record_replay(spec, report.replay_id, os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"), starts, ends, written, tables)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _finish(report: ReplayReport, started: float, run_dir: Path, s3: Any) -> None:
    report.finished_at = _now()
    report.seconds["total"] = round(time.perf_counter() - started, 3)
    store_report(report, run_dir, s3)
