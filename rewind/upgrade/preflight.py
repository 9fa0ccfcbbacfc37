"""The compatibility check before anything stops: the new version, for one bounded batch, on a copy
of the stream's state, into a shadow sink.

Why run it rather than compare declarations: Spark decides whether state written by one query
can be read by another (its StateSchemaCompatibilityChecker, when the first batch is planned on the
restored state), and only a batch shows that the new transform runs at all on today's records.
So: the newest savepoint (an online one is taken if there is none) is restored into a scratch
directory through the ordinary verified restore, the new version runs there with its sink
swapped for a throwaway SQLite file and ``maxOffsetsPerTrigger`` capped, and the first batch after
the savepoint must commit. The live stream, its checkpoint and its sink are never touched; a
refusal names what Spark or the table check found.

A batch needs records after the savepoint: the check waits for Kafka to hold some (a stream
with nothing arriving cannot be checked, and is refused saying so).

Today's records too: the newest savepoint may be an hour old and its range long processed, so a
version that throws on a record that arrived since would pass a check of that range alone and be
caught only after the stop, by failed launches and a rollback. So the new version's ``build`` also
runs as a bounded batch over the newest records of every partition, up to where the live stream
has committed (``NEWEST_PER_PARTITION`` each, 5,000; ``rewind.driver.bounded``); a failure there refuses
before the live stream is touched, naming the range.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewind.api.contract import load_transform
from rewind.checkpoints.savepoints import create_savepoint, list_savepoints, restore_savepoint
from rewind.checkpoints.watermark import committed_end_offsets
from rewind.driver.bounded import build_batch, partitions_of
from rewind.driver.runner import build_query
from rewind.driver.spark_session import build_session
from rewind.kafka.client_config import kafka_options, librdkafka_config
from rewind.kafka.lookups import true_end_offsets
from rewind.kafka.types import TP
from rewind.registry import SinkSpec, SourceSpec
from rewind.supervision.observe import running_reason
from rewind.upgrade.rules import Incompatible, UpgradeRefused, contract_changes, incompatible, spark_verdict

log = logging.getLogger(__name__)

#: At most this many offsets in the pre-flight batch: it proves the plan and the state, not throughput.
PREFLIGHT_MAX_OFFSETS = 500
#: The newest records of each partition (below the live stream's committed end) the new version runs on:
#: minutes of a busy partition, seconds of Spark on a bounded batch.
NEWEST_PER_PARTITION = 5000


@dataclass
class PreflightReport:
    savepoint_id: str
    savepoint_batch: int
    batch_id: int | None = None
    input_rows: int = 0
    seconds: float = 0.0
    changes: list[str] = field(default_factory=list)  # compatible table changes, for the record
    scratch: str = ""
    newest: dict[str, list[int]] = field(default_factory=dict)  # "topic-partition" -> [start, end) of today's run
    newest_records: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"savepoint_id": self.savepoint_id, "savepoint_batch": self.savepoint_batch, "batch_id": self.batch_id,
                "input_rows": self.input_rows, "seconds": round(self.seconds, 2), "changes": self.changes,
                "newest": self.newest, "newest_records": self.newest_records}


def newest_ranges(ends: Mapping[tuple[str, int], int], earliest: Mapping[TP, int],
                  per_partition: int = NEWEST_PER_PARTITION) -> dict[TP, tuple[int, int]]:
    """``[end - per_partition, end)`` of every partition with records below ``end`` (the live stream's
    committed end), never before the partition's earliest retained offset."""
    out: dict[TP, tuple[int, int]] = {}
    for (topic, part), end in sorted(ends.items()):
        tp = TP(topic, int(part))
        start = max(int(earliest.get(tp, 0)), int(end) - per_partition)
        if int(end) > start:
            out[tp] = (start, int(end))
    return out


def records_in(progress: Mapping[str, Any]) -> int:
    """The Kafka records a batch read, from its progress's offset ranges (``numInputRows`` counts a
    record once per read of the source, so a transform that reads its batch four times counts it four times)."""
    total = 0
    for source in progress.get("sources") or []:
        try:
            start, end = (json.loads(source.get(k) or "{}") if isinstance(source.get(k), str) else (source.get(k) or {})
                          for k in ("startOffset", "endOffset"))
        except ValueError:
            continue
        for topic, parts in (end or {}).items():
            for part, off in parts.items():
                total += max(0, int(off) - int((start or {}).get(topic, {}).get(part, off)))
    return total


def run_on_newest(spark: Any, old: Any, new: Any, bootstrap: str) -> tuple[dict[TP, tuple[int, int]], int]:
    """The new version's ``build`` over the newest committed records of every partition (see the module
    docstring); (the ranges, the records). Raises ``UpgradeRefused`` naming the ranges and the cause."""
    ends = committed_end_offsets(old)
    if not ends:
        return {}, 0
    earliest, _ = partitions_of(old, bootstrap)
    ranges = newest_ranges(ends, earliest)
    if not ranges:
        return {}, 0
    shown = ", ".join(f"{tp.topic}[{tp.partition}] {a}..{b}" for tp, (a, b) in ranges.items())
    try:
        build_batch(spark, new, load_transform(new), bootstrap, ranges, earliest=earliest,
                    description=f"rewind: pre-flight of {new.name} on the newest records")
    except Exception as exc:  # noqa: BLE001 - Spark's and the transform's errors alike: the cause is named
        text = str(getattr(exc, "desc", None) or exc)
        raise UpgradeRefused(f"the new version of {new.name} failed on the newest records ({shown}): "
                             f"{spark_verdict(text).reason} -- the live stream was not touched") from exc
    return ranges, sum(b - a for a, b in ranges.values())


def check_tables(old: Any, new: Any) -> list[str]:
    """Refuse incompatible output tables (``rules.table_changes``); the compatible changes, described."""

    changes = contract_changes(load_transform(old), load_transform(new))
    bad = incompatible(changes)
    if bad:
        raise Incompatible(f"the new version of {new.name} is incompatible with its sink: " + "; ".join(bad)
                           + " -- the live stream was not touched")
    return [f"table {c.table}: {c.what}" for c in changes]


def newest_savepoint(spec: Any, store: Any) -> Any:
    """The newest complete savepoint; an online one (safe while the stream runs) when there is none."""

    listing = list_savepoints(store, spec.name).complete
    return listing[0] if listing else create_savepoint(spec, store)


def wait_for_records_after(spec: Any, bootstrap: str, offsets: dict[str, dict[str, int]], timeout_s: float) -> None:
    """Until Kafka holds a record past the savepoint's offsets in some partition (else refused)."""

    config = librdkafka_config(kafka_options(spec.source.options))
    deadline = time.monotonic() + timeout_s
    while True:
        ends = true_end_offsets(bootstrap, spec.topics, config)
        if any(end > offsets.get(tp.topic, {}).get(str(tp.partition), 0) for tp, end in ends.items()):
            return
        if time.monotonic() > deadline:
            raise UpgradeRefused(f"no record arrived in {', '.join(spec.topics)} after the savepoint's offsets "
                                 f"{offsets} within {timeout_s:.0f}s: the pre-flight needs one batch of new records to "
                                 "run the new version on; retry when records flow -- the live stream was not touched")
        time.sleep(1.0)


def scratch_places(spec: Any, checkpoint: Path, status_dir: Path) -> dict[str, str]:
    """Where a scratch copy of ``spec`` keeps its checkpoint and its own documents (status, pointer,
    and the control store where the registry has one): nothing of the live stream's is shared, so a
    restore into the copy is not refused for the live stream's driver, nor touches its state."""
    places = {"checkpoint": str(checkpoint), "status_dir": str(status_dir)}
    if "control" in type(spec).model_fields:
        places["control"] = str(status_dir)
    return places


def scratch_spec(new: Any, scratch: Path) -> Any:
    """The new entry pointed at the scratch directory: its own checkpoint and status, a throwaway SQLite
    sink with the same tables, and a capped batch. A real-time entry's batch runs as a micro-batch (the
    mode admits no cap on what it reads); the mode's own refusals were checked before (``preflight``)."""

    options = {k: v for k, v in new.source.options.items() if k.lower() != "maxoffsetspertrigger"}
    cap = min(int(new.source.options.get("maxOffsetsPerTrigger", PREFLIGHT_MAX_OFFSETS)), PREFLIGHT_MAX_OFFSETS)
    return new.model_copy(update={
        **scratch_places(new, scratch / "checkpoint", scratch / "status"),
        "sink": SinkSpec(url=f"sqlite:///{scratch / 'shadow.db'}", table_prefix=new.sink.table_prefix),
        "source": SourceSpec(format=new.source.format, options={**options, "maxOffsetsPerTrigger": str(cap)}),
        **({"trigger": "1 second"} if new.real_time is not None else {})})


def run_one_batch(spark: Any, spec: Any, bootstrap: str, checkpoint: str, after_batch: int,
                  timeout_s: float) -> tuple[int, int]:
    """Run ``spec``'s query on ``checkpoint`` until a batch after ``after_batch`` commits; (batch, rows).
    Raises ``Incompatible`` or ``UpgradeRefused`` with Spark's reason when the query fails."""

    query = None
    try:
        query = build_query(spark, spec, bootstrap, checkpoint=checkpoint)
        deadline = time.monotonic() + timeout_s
        while True:
            progress = query.lastProgress
            if progress and int(progress["batchId"]) > after_batch:
                return int(progress["batchId"]), records_in(progress)
            if not query.isActive:
                break
            if time.monotonic() > deadline:
                raise UpgradeRefused(f"the new version of {spec.name} committed no batch within {timeout_s:.0f}s in "
                                     "the pre-flight -- the live stream was not touched")
            query.awaitTermination(0.5)
        failure = query.exception()
    except Exception as exc:  # noqa: BLE001 - Spark raises its analysis and state errors at start too
        if isinstance(exc, UpgradeRefused):
            raise
        failure = exc
    finally:
        if query is not None and query.isActive:
            query.stop()
    text = str(getattr(failure, "desc", None) or failure)
    verdict = spark_verdict(text)
    if verdict.state:
        raise Incompatible(f"the new version of {spec.name} cannot take over its state: {verdict.reason} -- the live "
                           "stream was not touched")
    raise UpgradeRefused(f"the new version of {spec.name} failed its pre-flight batch: {verdict.reason} -- the live "
                         "stream was not touched")


def preflight(old: Any, new: Any, store: Any, bootstrap: str, scratch: Path, *, spark: Any = None,
              timeout_s: float = 180.0) -> PreflightReport:
    """The whole check (see the module docstring); the scratch directory is removed when it passes and
    kept, for a look, when it refuses."""

    started = time.monotonic()
    changes = check_tables(old, new)
    manifest = newest_savepoint(old, store)
    report = PreflightReport(manifest.savepoint_id, manifest.batch_id, changes=changes, scratch=str(scratch))
    shutil.rmtree(scratch, ignore_errors=True)
    local = scratch_spec(new, scratch)
    if spark is None:
        spark = build_session(f"rewind-upgrade-{new.name}", conf=dict(new.spark_conf), sources=False)
    newest, report.newest_records = run_on_newest(spark, old, local, bootstrap)  # today's records first: cheap
    report.newest = {f"{tp.topic}-{tp.partition}": [a, b] for tp, (a, b) in newest.items()}
    wait_for_records_after(old, bootstrap, manifest.offsets, timeout_s)
    restored = restore_savepoint(local, store, manifest.savepoint_id, running=running_reason(local),
                                 to=scratch / "checkpoint")
    report.batch_id, report.input_rows = run_one_batch(spark, local, bootstrap, str(restored.path), manifest.batch_id,
                                                       timeout_s)
    report.seconds = time.monotonic() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return report
