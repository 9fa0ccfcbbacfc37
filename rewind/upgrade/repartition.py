"""``rewind checkpoint repartition NAME --partitions N``: rescale a stream's state through Spark's own
offline repartition, on a verified copy, with the old checkpoint kept for a rollback.

Why it is needed: a checkpoint's state partitions (``spark.sql.shuffle.partitions``) are fixed at
its first batch; Spark keeps them on every restart. PySpark 4.2 ships
``spark._streamingCheckpointManager.repartition(location, n, enforce_exactly_once_sink=True)``
(private, experimental; RocksDB checkpoints written by Spark 4.0 on), which rewrites every
stateful operator's state into N partitions and records that as a batch R that reads no data
(``offsets/R`` repeats ``offsets/R-1`` with the new partitions, ``commits/R`` repeats the commit).

The steps: the stream is stopped after its batch with a savepoint; the savepoint is restored into
a fresh directory (every checksum verified); Spark repartitions that copy; the copy must then
inspect as complete at R with N partitions in every operator; only then the stream's checkpoint
pointer moves to it and the stream is launched again, watched like an upgrade (if it commits no
batch within its startup grace, the pointer moves back and the old checkpoint runs). The old
checkpoint is never touched. Refused before anything stops, with the reason, where Spark cannot:
an HDFS-backed state store, a checkpoint written before Spark 4.0, no stateful operator, the same
number of partitions. Spark's repartition batch is understood by the inspector (it names it and
judges earlier batches on their own partitions, so repair can roll back across it) and by the sink
ledger, which never sees it: the next batch starts where batch R-1 ended, as every batch starts
where the previous offsets file ends.

Why in ``rewind.upgrade``: a rescale is an upgrade whose change is the state's partitioning. It runs
the upgrade's own steps (stop with a savepoint, switch, watch, roll back; its history record and
guard), a Spark session (``rewind.driver``) and the stream's liveness (``rewind.supervision``), over
the checkpoint tools; ``rewind.upgrade`` already sits above all three, while ``rewind.checkpoints``
sits below them (the driver and the supervisor read checkpoints), so there it made two loops.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.logs import parse_offsets_file
from rewind.checkpoints.pointer import active_checkpoint, point_to
from rewind.checkpoints.savepoints import restore_savepoint
from rewind.checkpoints.state_files import list_state
from rewind.driver.spark_session import build_session
from rewind.errors import Failed, Refused
from rewind.registry import parse_duration
from rewind.storage.local import LocalStorage
from rewind.storage.location import read_text
from rewind.supervision.observe import running_reason
from rewind.supervision.process_control import stream_liveness
from rewind.upgrade import guard, history
from rewind.upgrade.preflight import scratch_places
from rewind.upgrade.steps import stop_with_savepoint, watch

ROCKSDB = "RocksDBStateStoreProvider"
#: In the offset log's conf of every batch Spark 4.0 or later planned (absent before 4.0).
SPARK4_CONF = "spark.sql.streaming.stateStore.encodingFormat"


class RepartitionRefused(Refused):
    """Spark cannot (or need not) repartition this checkpoint; the message says why. Nothing was done."""


class RepartitionFailed(Failed):
    """The repartition started and broke; the message says where the stream was left."""


@dataclass(frozen=True)
class CheckpointFacts:
    """What the decision needs, read from the active checkpoint's newest committed batch."""

    location: str
    committed: int | None
    conf: dict[str, str]  # the offsets file's conf of that batch
    operators: tuple[str, ...]
    state_files: tuple[str, ...] = ()  # kinds seen in the state store (zip, changelog / delta, snapshot)


def refusal(facts: CheckpointFacts, partitions: int, can_repartition: bool = True) -> str | None:
    """Pure: why Spark's repartition cannot apply here, or None."""
    if partitions < 1:
        return f"--partitions must be at least 1, not {partitions}"
    if "://" in facts.location:
        return f"the checkpoint {facts.location} is not on local disk: the repartition works on a savepoint's copy"
    if facts.committed is None:
        return "there is no committed batch: Spark repartitions the state of the last committed batch"
    if not can_repartition:
        return "this PySpark has no offline state repartition (spark._streamingCheckpointManager, PySpark 4.2 on)"
    provider = facts.conf.get("spark.sql.streaming.stateStore.providerClass", "")
    if ROCKSDB not in provider or {"delta", "snapshot"} & set(facts.state_files):
        return (f"the state store is {provider.rsplit('.', 1)[-1] or 'not RocksDB'} (HDFS-backed files): Spark's "
                "offline repartition reads RocksDB state only")
    if SPARK4_CONF not in facts.conf:
        return ("the checkpoint was written before Spark 4.0 (its offset log has no "
                f"{SPARK4_CONF}): Spark's offline repartition reads checkpoints of Spark 4.0 on; run the stream on "
                "Spark 4 first")
    if not facts.operators:
        return "the stream has no stateful operator: there is no state to repartition"
    current = facts.conf.get("spark.sql.shuffle.partitions")
    if current is not None and int(current) == partitions:
        return f"the state already has {partitions} partitions"
    return None


def read_facts(location: str) -> CheckpointFacts:

    if "://" in location or not (Path(location) / "offsets").is_dir():
        return CheckpointFacts(location, None, {}, ())
    report = inspect_checkpoint(location, recent=2)
    committed = report.committed[-1] if report.committed else None
    conf: dict[str, str] = {}
    if committed is not None:
        meta, _ = parse_offsets_file(read_text(location, f"offsets/{committed}"))
        conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}

    kinds = {k for parts in list_state(LocalStorage(location)).values() for versions in parts.values()
             for ks in versions.values() for k in ks}
    return CheckpointFacts(location, committed, conf, tuple(sorted(report.operators)), tuple(sorted(kinds)))


def spark_repartition(spark: Any, location: str, partitions: int) -> None:
    """Spark's offline repartition. ``spark.streams`` is touched first: it registers the state store
    coordinator, without which a session that has run no query fails to load state on the executors."""
    spark.streams.active  # noqa: B018 - the side effect is the point
    spark._streamingCheckpointManager.repartition(location, partitions, True)


def check_result(path: Path, batch: int, partitions: int) -> None:
    """The copy must inspect as complete at the repartition batch, every operator in ``partitions``."""

    report = inspect_checkpoint(path)
    info = report.batch(batch)
    wrong = {op: len(parts) for op, parts in report.operators.items() if len(parts) != partitions}
    if report.errors or report.last_complete != batch or info is None or info.partitions != partitions or wrong:
        raise RepartitionFailed(f"the repartitioned copy {path} does not inspect as complete at batch {batch} with "
                                f"{partitions} partitions (last complete {report.last_complete}, operators {wrong}, "
                                f"problems {[p.detail for p in report.errors[:3]]})")


def repartition(spec: Any, store: Any, partitions: int, start: Callable[[Any], int] | None, *, spark: Any = None,
                grace_s: float | None = None, on_step: Callable[[str, str], None] = lambda _s, _d: None
                ) -> dict[str, Any]:
    """The whole rescale (see the module docstring); its history record. ``start(spec)`` launches the
    stream and returns its driver's pid once it runs (None: leave it stopped)."""

    before = active_checkpoint(spec)
    facts = read_facts(before)
    why = refusal(facts, partitions, spark is None or hasattr(spark, "_streamingCheckpointManager"))
    if why:
        raise RepartitionRefused(f"repartition of {spec.name} refused: {why} -- nothing was done")
    store.check()
    record_id = history.new_record_id()
    record: dict[str, Any] = {"id": record_id, "kind": "repartition", "stream": spec.name, "mode": "repartition",
                              "from": {"partitions": int(facts.conf.get("spark.sql.shuffle.partitions", 0)),
                                       "checkpoint": before},
                              "to": {"partitions": partitions}, "started_at": time.time(), "steps": [],
                              "result": "running"}

    def step(name: str, detail: str, **fields: Any) -> None:
        record["steps"].append({"step": name, "at": time.time(), "detail": detail})
        record.update(fields)
        history.save_record(spec, record)
        guard.step(spec, name)
        on_step(name, detail)

    guard.take(spec, record_id, "repartition")
    was_running = stream_liveness(spec).running
    relaunch = start if start is not None and was_running else None
    try:
        manifest = stop_with_savepoint(spec, store, start or (lambda _s: 0), 120.0)
        step("stopped", f"after batch {manifest.batch_id}, savepoint {manifest.savepoint_id}",
             savepoint={"id": manifest.savepoint_id, "batch_id": manifest.batch_id})
        dest = Path(before).resolve().with_name(f"{Path(spec.checkpoint).name}.p{partitions}-{record_id}")
        scratch = dest.with_name(f".{dest.name}.status")

        local = spec.model_copy(update=scratch_places(spec, dest, scratch))
        try:
            restore_savepoint(local, store, manifest.savepoint_id, running=running_reason(local), to=dest)
            Path(f"{dest}.active.json").unlink(missing_ok=True)  # the copy's own pointer: not the stream's
            shutil.rmtree(scratch, ignore_errors=True)
            if spark is None:

                spark = build_session(f"rewind-repartition-{spec.name}", conf=dict(spec.spark_conf), sources=False)
            spark_repartition(spark, str(dest), partitions)
            check_result(dest, manifest.batch_id + 1, partitions)
        except Exception as exc:
            if relaunch is not None:
                relaunch(spec)
            what = str(exc) if isinstance(exc, RepartitionFailed) else \
                f"the repartition of {spec.name}'s copy failed ({type(exc).__name__}: {str(exc).splitlines()[0][:600]})"
            raise RepartitionFailed(f"{what}; its checkpoint {before} was not switched"
                                    + (f" and {spec.name} runs on it again" if relaunch else "")) from exc
        point_to(spec, dest, f"repartitioned to {partitions} state partitions from savepoint {manifest.savepoint_id}")
        was = record["from"]["partitions"]
        step("switched", f"checkpoint {dest}, batch {manifest.batch_id + 1} repartitioned {was} -> {partitions}",
             checkpoint=str(dest))
        if relaunch is None:
            record.update(result="repartitioned", reason="left stopped", finished_at=time.time())
            history.save_record(spec, record)
            return record
        grace = grace_s if grace_s is not None else parse_duration(spec.supervision.startup_grace).total_seconds()
        verdict, reason, _ = watch(spec, relaunch, manifest.batch_id + 1, grace)
        if verdict == "healthy":
            record.update(result="repartitioned", reason=reason, finished_at=time.time())
        else:
            point_to(spec, before, f"rollback of repartition {record_id}: {reason[:300]}")
            relaunch(spec)
            record.update(result="rolled_back", reason=reason, finished_at=time.time())
        history.save_record(spec, record)
        return record
    except BaseException as exc:
        if record.get("result") == "running":
            record.update(result="failed", reason=f"{type(exc).__name__}: {exc}", finished_at=time.time())
            history.save_record(spec, record)
        raise
    finally:
        guard.release(spec, record_id)
