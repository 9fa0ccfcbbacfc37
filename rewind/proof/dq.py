"""The data-quality proof of exactly-once output: Great Expectations 1.x over Kafka and the sink.

``run_proof`` is the I/O edge; the package holds the rest, one role a module:

    read Kafka (verify.read_records) and the sink  ->  frames.build_frames (pure)
      ->  gx.validate_frames (checks.CHECKS)  ->  report.ProofResult  ->  publish (run dir, S3)

Kafka is re-read with a plain consumer (not the Spark source under test) and every record is
judged by the stream's own transform (its ``expect()``, or its ``build()`` run as a bounded batch
over the proved offsets when it has none: ``rewind.proof.contract_proof``). Aggregate tables are
proven by value for every stream: each group recomputed from Kafka (``rewind.proof.aggregates``).

Which range: by default everything below the end offsets of the stream's last committed
batch (a running stream is still reading; a crashed one has not read the rest yet), else every
record in its topics. Explicit ``bounds`` give ``[start, end)`` per partition (e.g. a replay's
range). Kafka is read from the beginning either way: duplicate sends and windows need the
records before ``start`` as context, and a window holding records of the range may hold later
records too (``rewind.proof.frames`` says what is judged). Windows are judged up to the watermark
of the stream's last committed batch, read from its checkpoint (``stream_watermark``).

No Airflow here: the Airflow task and ``rewind dq`` (rewind/cli/dq.py) both call
``run_proof`` and log ``rewind.proof.report.format_proof``.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from rewind.api.contract import load_transform
from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.watermark import planned_after
from rewind.driver.late_routing import explain
from rewind.driver.runner import open_sink
from rewind.proof.checks import (
    CHECKS,
    CONTRACT_CHECKS,
    CONTRACT_FRAME_NOTES,
    CONTRACT_SUITE,
    COORDS,
    FRAME_NOTES,
    SUITE,
)
from rewind.proof.contract_proof import contract_frames, records_frame
from rewind.proof.cursor import resolve_span, write_cursor
from rewind.proof.frames import Bounds, build_frames, kafka_frame, normalize_bounds
from rewind.proof.gx import validate_frames
from rewind.proof.publish import (
    local_paths,
    s3_store,
    upload_proof,
    upload_results,
    write_proof,
    write_validation_result,
)
from rewind.proof.report import ProofResult
from rewind.proof.scope import committed_position, nothing_to_prove
from rewind.proof.suite import suite_of
from rewind.proof.values import rules_for
from rewind.proof.verify import read_records, with_duplicates
from rewind.safe_names import check_run_id


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def run_proof(spec: Any, bootstrap: str, *, bounds: Bounds | None = None, run_dir: Path,
              s3: Any = None, run_id: str | None = None) -> ProofResult:
    """Prove exactly-once for a Kafka range of ``spec``'s stream; store results and Data Docs.

    ``bounds``: per partition ``[start, end)`` (see ``normalize_bounds``); default: below the
    end offsets of the stream's last committed batch if it runs, else everything. Without
    ``bounds`` and before the stream's first committed batch there is nothing to prove: the
    result passes with ``nothing_to_prove`` set and nothing is read (``rewind.proof.scope``).
    ``s3``: an ``rewind.storage.S3Storage`` or ``S3Config`` to upload to (None: local only). An
    upload failure does not change the verdict; it is in ``s3_error`` and in the log text.
    """

    if spec.dq_suite not in (SUITE, CONTRACT_SUITE):
        raise ValueError(f"stream {spec.name}: unknown dq_suite {spec.dq_suite!r} (known: {SUITE!r}, "
                         f"{CONTRACT_SUITE!r})")
    suite_name = suite_of(spec)
    run_id = check_run_id(run_id or new_run_id())  # it names dq/STREAM/RUN_ID in S3: no '..', no '/'
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    d = spec.durations()
    seconds: dict[str, float] = {}
    notes: list[str] = []
    t0 = time.perf_counter()

    # First, before Kafka and the sink: what the stream had committed. The proof answers for that and
    # no more (rows of later batches are not judged), so a proof of a running stream never alarms on a
    # correct sink.
    position = committed_position(spec)
    last_batch = position.batch
    empty = nothing_to_prove(spec.name, last_batch, bounds is not None)
    if empty:  # before the first committed batch: no FAIL for records the stream has not reached
        result = ProofResult(spec.name, run_id, True, {}, {}, 0, [], local_paths(run_dir, run_dir / "data_docs"),
                             nothing_to_prove=empty, seconds={"total": round(time.perf_counter() - t0, 3)})
        write_proof(result)
        return result
    norm = normalize_bounds(bounds)
    if norm is None and position.end_offsets:
        # What the stream has committed is what it answers for: a running stream is still reading,
        # a crashed one has not read the rest yet (its restart will).
        norm = {k: (0, v) for k, v in position.end_offsets.items()}
        notes.append(f"{position.describe(spec.name)}: the range ends at that batch's offsets")
    elif last_batch is not None:
        notes.append(f"{position.describe(spec.name)}")
    watermark, wm_batch = position.watermark, last_batch

    if suite_name == CONTRACT_SUITE:
        frames_of: Any = _contract_frames(spec, bootstrap, bounds, norm, position, seconds, notes)
        suite = (CONTRACT_CHECKS, CONTRACT_SUITE, CONTRACT_FRAME_NOTES)
    else:
        frames_of = _exactly_once_frames(spec, bootstrap, norm, seconds, notes, watermark, wm_batch, last_batch, d)
        suite = (CHECKS, SUITE, FRAME_NOTES)

    t = time.perf_counter()
    docs_dir = run_dir / "data_docs"
    ge_results, failures, total = validate_frames(frames_of.frames(), spec.name, run_id, docs_dir, *suite)
    seconds["validate_and_docs"] = time.perf_counter() - t
    result = ProofResult(spec.name, run_id, not failures, frames_of.range, frames_of.counts, total, failures,
                         local_paths(run_dir, docs_dir), notes=notes)
    write_validation_result(result, ge_results)
    if result.ok and suite_name == CONTRACT_SUITE and bounds is None:

        write_cursor(spec, frames_of.span, run_id)

    store = s3_store(s3)
    if store is not None:
        t = time.perf_counter()
        upload_results(store, result, docs_dir)
        seconds["upload"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    write_proof(result)
    if store is not None:
        upload_proof(store, result)
    return result


def _contract_frames(spec: Any, bootstrap: str, bounds: Any, norm: Any, position: Any, seconds: dict[str, float],
                     notes: list[str]) -> Any:
    """A contract stream's two frames (``rewind.proof.contract_proof``): explicit bounds, else since the
    last passed proof (its cursor) up to the last committed batch: the hourly run proves the last hour."""

    t = time.perf_counter()
    if bounds is not None:
        span = norm
    else:
        span, clipped = resolve_span(spec, bootstrap, since="cursor", committed=position.end_offsets)
        notes.extend(clipped)
        notes.append(f"proving {sum(e - s for s, e in span.values())} offsets since the last passed proof")
    frames = contract_frames(spec, bootstrap, span, last_batch=position.batch, watermark=position.watermark,
                             committed_ends=position.end_offsets)
    frames.span = span
    notes.extend(frames.notes)
    seconds["frames"] = time.perf_counter() - t
    return frames


def _exactly_once_frames(spec: Any, bootstrap: str, norm: Any, seconds: dict[str, float], notes: list[str],
                         watermark: Any, wm_batch: Any, last_batch: Any, d: Any) -> Any:
    """The demo-shaped suite's four frames (events, dead letters, coverage, windows)."""

    transform = load_transform(spec)
    aggregate = next((a for a in transform.aggregates if a.table == "window_results"), None)
    sink = open_sink(spec, transform)
    try:
        t = time.perf_counter()
        # Everything, not only the range: a window's expected result counts events past the range's
        # end too (a range may end mid-window).
        records = read_records(bootstrap, spec.topics, source_options=spec.source.options)
        seconds["read_kafka"] = time.perf_counter() - t
        t = time.perf_counter()
        events, dead = with_duplicates(sink, "events", sink.read_table("events")), sink.read_table("dead_letter")
        windows = sink.read_table("window_results") if aggregate is not None else pd.DataFrame()
        rules = rules_for(sink.specs["window_results"]) if "window_results" in sink.specs else {}
        # after the reads: the batches the checkpoint had planned by then past the proved one
        later = planned_after(spec, last_batch) if last_batch is not None else None
        seconds["read_sink"] = time.perf_counter() - t
    finally:
        sink.dispose()
    t = time.perf_counter()
    kafka = kafka_frame(records, transform.expect(records_frame(records), spec))
    frames = build_frames(kafka, events, dead, windows, bounds=norm, window=d["window"], aggregate=aggregate,
                          watermark_delay=d["watermark_delay"], stream_watermark=watermark, last_batch=last_batch,
                          rules=rules, later=later)
    frames.counts["stream_watermark"] = watermark.isoformat() if watermark else None
    frames.counts["watermark_batch"] = wm_batch
    if frames.counts.get("missing"):
        why = explain_missing_rows(spec, frames.coverage, kafka)
        frames.counts["missing_explained"] = why
        behind = sum(1 for w in why if w.get("behind_watermark"))
        notes.append(f"{frames.counts['missing']} record(s) missing; of the first {len(why)}, {behind} were read by a "
                     "batch behind its watermark (Spark's stateful operators dropped them) - see missing_explained")
    seconds["frames"] = time.perf_counter() - t
    return frames


# --------------------------------------------------------------------------- why records are missing
def explain_missing_rows(spec: Any, coverage: pd.DataFrame, kafka: pd.DataFrame,
                         limit: int = 50) -> list[dict[str, Any]]:
    """Which batch read each missing record and whether it was behind that batch's watermark."""

    gone = coverage[coverage["landed_in"] == "missing"].head(limit).merge(
        kafka[[*COORDS, "event_time"]], on=COORDS, how="left", suffixes=("", "_k"))
    coords = [((t, int(p), int(o)), None if pd.isna(et) else int(pd.Timestamp(et).value // 1000))
              for t, p, o, et in zip(gone["topic"], gone["partition"], gone["offset"], gone["event_time"])]
    return explain(coords, active_checkpoint(spec))
