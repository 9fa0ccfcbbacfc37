"""The Spark edge of a replay: refuse what it cannot keep whole, read each chunk, transform, write;
then recompute the aggregate groups it touched, bring late records back if asked, compare, prove.

``rewind.replay.run.run_replay`` locks and reports; this module does the work of a validated
``rewind.replay.setup.ReplaySetup``: the chunks (``rewind.replay.chunks``), the aggregates
(``rewind.replay.recompute``, decided by ``rewind.replay.aggregates``), the late records
(``rewind.replay.late``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rewind.api.contract import load_transform
from rewind.driver.bounded import partitions_of
from rewind.driver.runner import open_sink
from rewind.proof.aggregate_proof import late_coordinates
from rewind.proof.dq import run_proof
from rewind.proof.report import format_proof
from rewind.replay.aggregates import refusals
from rewind.replay.chunks import replay_chunks
from rewind.replay.late import late_in_range, late_refusals, retire_dead_letters
from rewind.replay.problems import ReplayRefused
from rewind.replay.recompute import recompute_touched
from rewind.replay.report import ReplayReport
from rewind.replay.setup import ReplaySetup
from rewind.replay.shadow import compare_shadow, compare_tables

log = logging.getLogger("rewind.replay.run")


def _sinks(setup: ReplaySetup, spark: Any) -> tuple[Any, Any, Any]:
    """(target sink, main sink, the stream's transform); target is main in into-sink mode."""

    transform = load_transform(setup.spec)
    main = open_sink(setup.spec, transform, spark)
    if setup.mode == "into-sink":
        return main, main, transform
    return open_sink(setup.target_spec, transform, spark), main, transform


def check_before_writing(setup: ReplaySetup, bootstrap: str) -> None:
    """Refuse (``ReplayRefused``, nothing written) a replay that could not keep the stream's aggregates
    whole, or bring late records back into a sink that cannot delete."""

    transform = load_transform(setup.spec)
    earliest, _ = partitions_of(setup.spec, bootstrap)
    problems = refusals(transform.tables, transform.aggregates, earliest)
    problems += late_refusals(setup)
    if problems:
        raise ReplayRefused(problems)


def execute(setup: ReplaySetup, bootstrap: str, spark: Any, report: ReplayReport, *, progress: bool,
            chunk_offsets: int) -> None:
    """Replay every chunk, recompute the touched aggregate groups, bring late records back (if asked),
    compare (shadow mode); fills ``report``."""

    target, main, transform = _sinks(setup, spark)
    try:
        target.create_tables()
        report.sink["tables"] = {t: target.table_name(t) for t in target.specs}
        earliest, ends = partitions_of(setup.spec, bootstrap)
        late = late_in_range(main, transform, setup.ranges) if setup.reprocess_late else set()
        t0 = time.perf_counter()
        touched = replay_chunks(setup, bootstrap, spark, target, transform, report, earliest=earliest, late=late,
                                progress=progress, chunk_offsets=chunk_offsets)
        report.seconds["read_transform_write"] = round(time.perf_counter() - t0, 3)
        if transform.aggregates:
            t0 = time.perf_counter()
            still_late = late_coordinates(main, transform.dead_letter_table) - late
            outcomes = recompute_touched(setup, bootstrap, spark, target, main, transform, touched,
                                         earliest=earliest, ends=ends, exclude=still_late)
            report.aggregates = {t: o.to_json() for t, o in outcomes.items()}
            report.windows = next(iter(report.aggregates.values()))  # the first aggregate table (as before)
            for table, o in outcomes.items():
                report.counts["written"][table] = o.written
            report.seconds["aggregates"] = round(time.perf_counter() - t0, 3)
        if late and setup.mode == "into-sink":
            report.counts["late_dead_letters_retired"] = retire_dead_letters(main, transform, late, setup.replay_id)
        if setup.mode == "shadow":

            t0 = time.perf_counter()
            demo_shaped = {"events", "dead_letter", "window_results"} <= set(target.specs) and \
                any(a.table == "window_results" for a in transform.aggregates)
            report.comparison = (compare_shadow(main, target, setup.ranges, transform) if demo_shaped
                                 else compare_tables(main, target, setup.ranges, transform))
            report.seconds["compare"] = round(time.perf_counter() - t0, 3)
    finally:
        spark.sparkContext.setJobDescription(None)
        for sink in {id(main): main, id(target): target}.values():
            sink.dispose()


def prove_range(setup: ReplaySetup, bootstrap: str, report: ReplayReport, s3: Any) -> None:

    t = time.perf_counter()
    result = run_proof(setup.target_spec, bootstrap, bounds=setup.bounds, run_dir=setup.run_dir / "proof", s3=s3,
                       run_id=f"replay-{setup.replay_id}")
    report.seconds["proof"] = round(time.perf_counter() - t, 3)
    report.proof = {"ok": result.ok, "run_id": result.run_id, "expectations": result.expectations,
                    "failed": [f.name for f in result.failures], "counts": result.counts, "local": result.local,
                    "s3": result.s3, "s3_error": result.s3_error, "notes": result.notes,
                    "text": format_proof(result)}
