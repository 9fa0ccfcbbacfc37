"""The Spark edge of a replay: read each chunk, transform, write; then windows, comparison, proof.

``rewind.replay.run.run_replay`` locks and reports; this module does the work of a validated
``rewind.replay.setup.ReplaySetup``, chunk by chunk (see the ``rewind.replay.run`` docstring for
why chunks and why ``write_rows``).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import numpy as np

from rewind.replay.planner import consumer_config
from rewind.replay.report import ReplayReport
from rewind.replay.setup import RECOMPUTED, RECOMPUTED_KIND, Ranges, ReplaySetup, plan_chunks
from rewind.stream.batch_writer import arrow_to_pandas
from rewind.stream.source import bounded_options, bounded_read

log = logging.getLogger("rewind.replay.run")


def _sinks(setup: ReplaySetup) -> tuple[Any, Any, Any]:
    """(target sink, main sink, the stream's transform); target is main in into-sink mode."""
    from rewind.stream.contract import load_transform
    from rewind.stream.runner import open_sink

    transform = load_transform(setup.spec)
    main = open_sink(setup.spec, transform)
    if setup.mode == "into-sink":
        return main, main, transform
    return open_sink(setup.target_spec, transform), main, transform


def _other_partitions(setup: ReplaySetup, bootstrap: str) -> Ranges:
    """Empty ranges for the partitions of the replayed topics that the plan leaves out: a batch
    read with per-partition offsets must name every partition of its topics."""
    from rewind.kafka.lookups import KafkaOffsetClient

    topics = sorted({p.topic for p in setup.plan.partitions})
    client = KafkaOffsetClient(consumer_config(setup.spec, bootstrap), 60.0)
    try:
        others = [tp for tp in client.partitions(topics) if tp not in setup.ranges]
        earliest = client.earliest_offsets(others) if others else {}
    finally:
        client.close()
    return {tp: (off, off) for tp, off in earliest.items()}


def execute(setup: ReplaySetup, bootstrap: str, spark: Any, report: ReplayReport, *, progress: bool,
            chunk_offsets: int) -> None:
    """Replay every chunk, recompute the touched windows, compare (shadow mode); fills ``report``."""
    from rewind.replay.windows import closing_horizon, recompute_pairs

    target, main, transform = _sinks(setup)
    try:
        target.create_tables()
        report.sink["tables"] = {t: target.table_name(t) for t in target.specs}
        t0 = time.perf_counter()
        pairs = _replay_chunks(setup, bootstrap, spark, target, transform, report, progress=progress,
                               chunk_offsets=chunk_offsets)
        report.seconds["read_transform_write"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        if RECOMPUTED in target.specs:  # windows a replay recomputes from the raw events (the demo's shape)
            horizon, source = closing_horizon(setup.spec, main)
            sources = [main] if setup.mode == "into-sink" else [main, target]
            outcome = recompute_pairs(pairs, target=target, sources=sources, present_in=sources, spec=setup.spec,
                                      horizon=horizon, horizon_source=source, replay_id=setup.replay_id)
            report.windows = outcome.to_json()
            report.counts["written"][RECOMPUTED] = outcome.written
            report.seconds["windows"] = round(time.perf_counter() - t0, 3)
        if setup.mode == "shadow":
            from rewind.replay.shadow import compare_shadow, compare_tables

            t0 = time.perf_counter()
            demo_shaped = {"events", "dead_letter", RECOMPUTED} <= set(target.specs)
            report.comparison = (compare_shadow(main, target, setup.ranges) if demo_shaped
                                 else compare_tables(main, target, setup.ranges, transform))
            report.seconds["compare"] = round(time.perf_counter() - t0, 3)
    finally:
        spark.sparkContext.setJobDescription(None)
        for sink in {id(main): main, id(target): target}.values():
            sink.dispose()


def _replay_chunks(setup: ReplaySetup, bootstrap: str, spark: Any, target: Any, transform: Any,
                   report: ReplayReport, *, progress: bool, chunk_offsets: int) -> set[Any]:
    """Read, transform and write each chunk; returns the (window_start, key) pairs its events touch.

    A record sent twice whose copies fall in different chunks leaves a row in each chunk's output:
    the second is counted as a duplicate collapsed, not as a row already present (``_repeats``).

    The sink write of chunk i overlaps the Spark work of chunk i+1: one writer thread takes each
    chunk's Arrow result (pandas conversion, split, dead-letter check, ``write_rows``) while this
    thread runs the next chunk's job. At most two chunks are in memory, the sink is only touched
    by the writer (one chunk at a time, in order), and a failure waits for the write in flight,
    so whole chunks are written or none.
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    from tqdm import tqdm

    spec, plan = setup.spec, setup.plan
    written = [t for t in target.specs if t != RECOMPUTED]
    counts: dict[str, Any] = {"records_planned": plan.total_records, "records_planned_exact": plan.exact,
                              "records_read": 0, "events_out": 0, "dead_letters_out": 0,
                              "written": {t: 0 for t in written}, "already_present": {t: 0 for t in written}}
    report.counts = counts
    padding = _other_partitions(setup, bootstrap)
    options = bounded_options(spec, bootstrap, sorted({p.topic for p in plan.partitions}))
    chunks = plan_chunks(setup.ranges, chunk_offsets)
    pairs: set[Any] = set()
    identity = transform.identity
    window = spec.durations()["window"] if _recomputes_windows(target) else None
    earlier = np.empty(0, dtype=np.uint64)  # hashes of the identities earlier chunks output
    bar = tqdm(total=plan.total_records, unit="rec", unit_scale=True, disable=not progress, file=sys.stderr,
               desc=f"replay {setup.replay_id}")

    def write(i: int, chunk: Ranges, arrow: Any, read: int, read_s: float, count_s: float, t: float) -> None:
        from rewind.replay.windows import event_pairs, pairs_of

        w = time.perf_counter()
        tables = transform.split(arrow_to_pandas(arrow), None)  # batch_id NULL: written by a replay
        # the windows the events touch (the plan has no window rows, see _without_recomputed)
        pairs.update(event_pairs(tables.get("events"), window) if window is not None
                     else pairs_of(tables.get(RECOMPUTED)))
        tables = _keep_dead_letters_dead(target, tables, chunk, transform)
        nonlocal earlier
        repeats, earlier = _repeats(tables.get(identity.table), identity.columns, earlier)
        inserted: dict[str, int] = {}
        target.write_rows({t: tables[t] for t in written if t in tables}, replay_id=setup.replay_id,
                          inserted=inserted)
        out = {t: int(len(tables.get(t, ()))) for t in written}
        again = {identity.table: repeats}
        row = {"chunk": i, "offsets": sum(e - s for s, e in chunk.values()), "records": read, "out": out,
               "inserted": inserted, "repeats_of_earlier_chunks": repeats,
               "read_s": round(read_s, 3), "count_s": round(count_s, 3), "write_s": round(time.perf_counter() - w, 3),
               "seconds": round(time.perf_counter() - t, 3)}
        report.chunks.append(row)
        counts["records_read"] += read
        counts["events_out"] += out.get(identity.table, 0) - repeats
        counts["dead_letters_out"] += out.get(transform.dead_letter_table, 0)
        for name in written:
            new = inserted.get(name, out.get(name, 0))
            counts["written"][name] += new
            counts["already_present"][name] += max(0, out.get(name, 0) - new - again.get(name, 0))
        bar.update(read)
        log.info("replay %s chunk %d/%d: %d offsets, %d records read in %.2fs, written in %.2fs (beside the next "
                 "chunk's read), out %s, new %s", setup.replay_id, i, len(chunks), row["offsets"], read,
                 row["read_s"], row["write_s"], out, inserted)

    pending: Future[None] | None = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"replay-{setup.replay_id}-writer")
    try:
        for i, chunk in enumerate(chunks, 1):
            t = time.perf_counter()
            full = {**padding, **chunk}
            spark.sparkContext.setJobDescription(f"rewind replay {setup.replay_id} chunk {i}/{len(chunks)}")
            # read Kafka once: the transform scans its input once per output branch
            src = bounded_read(spark, spec, options, full).persist()
            try:
                read = src.count()
                count_s = time.perf_counter() - t
                out = transform.build(src, spec)
                arrow = (_without_recomputed(out) if window is not None else out).toArrow()
            finally:
                src.unpersist()
            read_s = time.perf_counter() - t
            if pending is not None:
                pending.result()  # the previous chunk is written (or its error raised) before the next starts
            pending = pool.submit(write, i, chunk, arrow, read, read_s, count_s, t)
        if pending is not None:
            pending.result()
    finally:
        pool.shutdown(wait=True)  # a failed read still lets the write in flight finish: whole chunks only
        bar.close()
    counts["duplicates_collapsed"] = counts["records_read"] - counts["events_out"] - counts["dead_letters_out"]
    return pairs


def _recomputes_windows(target: Any) -> bool:
    """Whether the replay recomputes the window results from the sink's events (the demo's shape:
    ``rewind.replay.windows``), so that the transform's window rows are not needed."""
    if RECOMPUTED not in target.specs or "events" not in target.specs:
        return False
    return {"event_time", "key"} <= set(target.specs["events"].column_names)


def _without_recomputed(out: Any) -> Any:
    """The transform's output without its rows for ``RECOMPUTED``: Spark then plans no window branch.

    Why: a replay throws the transform's window rows away (partial aggregates of the range) and
    recomputes the windows from the sink; it only needs the pairs they name, which the events give
    (``rewind.replay.windows.event_pairs``). The filter on the constant ``kind`` of each branch of
    the union is folded by Spark's optimizer, which drops the window branch (its second
    deduplication, its aggregation and their shuffles) from the plan (``tests/test_demo_plan.py``).
    """
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") != RECOMPUTED_KIND) if "kind" in out.columns else out


def _repeats(rows: Any, columns: tuple[str, ...], earlier: Any) -> tuple[int, Any]:
    """How many ``rows`` carry an identity an earlier chunk output, and the hashes seen so far.

    Counting only: every row is still written (a ``latest`` table may need the later copy). The
    identities are kept as 64-bit hashes (8 bytes each, 8 MB for a million): a collision would
    count one row as a repeat instead of already present, never drop it.
    """
    import pandas as pd

    if rows is None or not len(rows) or not set(columns) <= set(rows.columns):
        return 0, earlier
    hashes = pd.util.hash_pandas_object(rows[list(columns)], index=False).to_numpy(dtype=np.uint64)
    return int(np.isin(hashes, earlier).sum()), np.concatenate([earlier, hashes])


def _keep_dead_letters_dead(target: Any, tables: dict[str, Any], chunk: Ranges, transform: Any) -> dict[str, Any]:
    """Rows of records the sink already holds as dead letters are not written again as rows (of the
    transform's identity table, when it carries the Kafka coordinates).

    Why: the live stream routes a record that arrived behind the watermark to the dead-letter table
    (``behind_watermark``); a replay, a batch read without a watermark, would find it valid and
    write it as an event too, and the record would then be in two places. A replay repairs what is
    missing; it does not overturn the stream's verdicts.
    """

    name, dead_table = transform.identity.table, transform.dead_letter_table
    events = tables.get(name)
    if events is None or not len(events) or dead_table not in target.specs \
            or not {"topic", "partition", "offset"} <= set(events.columns):
        return tables
    from rewind.sink.dialects import coordinates_in

    dead = target.read_rows(dead_table, where=coordinates_in(chunk), columns=["topic", "partition", "offset"])
    if not len(dead):
        return tables
    taken = set(zip(dead["topic"], dead["partition"].astype(int), dead["offset"].astype(int)))
    keep = [(t, int(p), int(o)) not in taken for t, p, o in zip(events["topic"], events["partition"], events["offset"])]
    if not all(keep):
        log.info("replay: %d row(s) left out: their records are dead letters already", keep.count(False))
    return {**tables, name: events[keep]}


def prove_range(setup: ReplaySetup, bootstrap: str, report: ReplayReport, s3: Any) -> None:
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof

    t = time.perf_counter()
    result = run_proof(setup.target_spec, bootstrap, bounds=setup.bounds, run_dir=setup.run_dir / "proof", s3=s3,
                       run_id=f"replay-{setup.replay_id}")
    report.seconds["proof"] = round(time.perf_counter() - t, 3)
    report.proof = {"ok": result.ok, "run_id": result.run_id, "expectations": result.expectations,
                    "failed": [f.name for f in result.failures], "counts": result.counts, "local": result.local,
                    "s3": result.s3, "s3_error": result.s3_error, "notes": result.notes,
                    "text": format_proof(result)}
