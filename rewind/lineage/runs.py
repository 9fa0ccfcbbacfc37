"""The lineage of one driver run and of one replay, as their code calls it (``rewind.lineage.config.Lineage``).

A driver run: START when its query has started, RUNNING every ``REWIND_LINEAGE_INTERVAL_S`` (60 s) with the
last committed batch's rows per topic (Spark's progress) and per table (the batch writer's counts), then
COMPLETE (a graceful stop), FAIL (the query or the driver failed) or ABORT (the driver was fenced: another
took the stream over). Its run id is the driver's lease id (``Holder.driver_id``, a UUID kept in the
stream's status), so whoever sees the driver die can still close its run.

A replay: START when its Spark session is there, then COMPLETE with the range's rows read per topic and
written per table, or FAIL.

What the caller's threads do here is store figures under a lock and queue a callable; the events are built
and sent on the emitter's thread (``rewind.lineage.emitter``).
"""

from __future__ import annotations

import os
import threading
import traceback
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from openlineage.client import OpenLineageClient
from openlineage.client.uuid import generate_new_uuid

from rewind.lineage.config import Lineage
from rewind.lineage.emitter import Emitter
from rewind.lineage.events import Counts, Dataset, RunSpec, run_event, topic_rows
from rewind.lineage.naming import sink_datasets, topic_datasets
from rewind.lineage.parent import parent_from
from rewind.registry import StreamSpec

__all__ = ["ReplayLineage", "StreamLineage", "close_dead_run", "job_namespace"]

#: How long a final event may take to leave: the driver gives up its lease after it, so it is short.
CLOSE_S = 5.0


def job_namespace(conf: Mapping[str, str], env: Mapping[str, str]) -> str:
    """The jobs' namespace, as Spark's and Airflow's integrations choose theirs: ``spark.openlineage.namespace``,
    else ``OPENLINEAGE_NAMESPACE``, else ``default``."""
    return conf.get("spark.openlineage.namespace") or env.get("OPENLINEAGE_NAMESPACE") or "default"


def _datasets(spec: StreamSpec, bootstrap: str, tables: Iterable[Any]) -> tuple[Dataset, ...]:
    """The sink's tables as output datasets, with their columns where the table spec has them resolved."""
    listed = list(tables)
    names = sink_datasets(spec.sink.url, {t.name: f"{spec.sink.table_prefix}{t.name}" for t in listed}, bootstrap)
    columns = {t.name: tuple((c.name, str(c.type)) for c in (t.columns or ())) for t in listed}
    return tuple(Dataset(n.namespace, n.name, n.table, columns.get(str(n.table), ())) for n in names)


def _error(error: BaseException | str | None) -> tuple[str | None, str | None]:
    if error is None or isinstance(error, str):
        return error, None
    return (f"{type(error).__name__}: {error}",
            "".join(traceback.format_exception(type(error), error, error.__traceback__))[-20_000:])


def _conf(spark: Any) -> dict[str, str]:
    return {k: v for k, v in spark.sparkContext.getConf().getAll() if k.startswith("spark.openlineage.")}


class StreamLineage(Lineage):
    """One driver run's events (see the module docstring)."""

    def __init__(self, spec: RunSpec, stream: StreamSpec, bootstrap: str, client: Any) -> None:
        self.spec, self.stream, self.bootstrap = spec, stream, bootstrap
        self.run_id = spec.run_id
        self._lock = threading.Lock()
        self._written: dict[int, dict[str, int]] = {}
        self._last: Counts | None = None
        self._started = self._ended = False
        self.emitter = Emitter(client, tick_s=spec.interval_s, on_tick=self._running, name="rewind-lineage")

    @classmethod
    def create(cls, stream: StreamSpec, bootstrap: str, spark: Any, run_id: str, interval_s: float) -> StreamLineage:
        conf = _conf(spark)
        spec = RunSpec(str(uuid.UUID(run_id)), job_namespace(conf, os.environ), f"rewind.{stream.name}", "STREAMING",
                       "STREAM", tuple(Dataset(d.namespace, d.name) for d in topic_datasets(stream.topics, bootstrap)),
                       (), parent_from(conf, os.environ), str(spark.version), interval_s)
        return cls(spec, stream, bootstrap, OpenLineageClient())

    def outputs(self, tables: Iterable[Any]) -> None:
        with self._lock:
            self.spec = replace(self.spec, outputs=_datasets(self.stream, self.bootstrap, tables))

    def rows(self, batch_id: int, counts: Mapping[str, int]) -> None:
        with self._lock:
            self._written[int(batch_id)] = {k: int(v) for k, v in counts.items()}
            for old in [b for b in self._written if b < batch_id - 5]:  # a batch whose progress never came
                del self._written[old]

    def progress(self, progress: Any) -> None:
        source = (progress.sources or [None])[0]
        rows = topic_rows(list(self.stream.topics), int(progress.numInputRows or 0),
                          getattr(source, "startOffset", None), getattr(source, "endOffset", None))
        with self._lock:
            self._last = Counts(progress.batchId, rows, self._written.pop(int(progress.batchId), {}))

    def start(self) -> None:
        with self._lock:
            self._started = True
            spec = self.spec
        self.emitter.submit(lambda: run_event("START", spec))

    def _running(self) -> Any:
        with self._lock:
            if not self._started or self._ended:
                return None
            return run_event("RUNNING", self.spec, counts=self._last)

    def finish(self, state: str, error: BaseException | str | None = None) -> None:
        message, stack = _error(error)
        with self._lock:
            self._ended = True
            spec, last = self.spec, self._last
        self.emitter.submit(lambda: run_event(state, spec, counts=last, error=message, stack=stack))
        self.emitter.close(CLOSE_S)


class ReplayLineage(Lineage):
    """One replay's events: START, then COMPLETE or FAIL with the range's totals."""

    def __init__(self, spec: RunSpec, target: StreamSpec, bootstrap: str, client: Any) -> None:
        self.spec, self.target, self.bootstrap = spec, target, bootstrap
        self.run_id = spec.run_id
        self._totals: Counts | None = None
        self.emitter = Emitter(client, name="rewind-replay-lineage")

    @classmethod
    def create(cls, stream: StreamSpec, target: StreamSpec, bootstrap: str, spark: Any,
               replay_id: str) -> ReplayLineage:
        conf = _conf(spark)
        spec = RunSpec(str(generate_new_uuid()), job_namespace(conf, os.environ), f"rewind.{stream.name}.replay",
                       "BATCH", "REPLAY",
                       tuple(Dataset(d.namespace, d.name) for d in topic_datasets(stream.topics, bootstrap)), (),
                       parent_from(conf, os.environ), str(spark.version))
        return cls(spec, target, bootstrap, OpenLineageClient())

    def outputs(self, tables: Iterable[Any]) -> None:
        self.spec = replace(self.spec, outputs=_datasets(self.target, self.bootstrap, tables))

    def rows(self, batch_id: int, counts: Mapping[str, int]) -> None:
        """The replay's totals: ``counts`` per table; ``batch_id`` unused (a replay has no batches)."""
        inputs = self._totals.inputs if self._totals else {}
        self._totals = Counts(None, inputs, dict(counts))

    def read(self, per_topic: Mapping[str, int]) -> None:
        """Rows the replay read, per topic."""
        self._totals = Counts(None, dict(per_topic), self._totals.outputs if self._totals else {})

    def start(self) -> None:
        spec = self.spec
        self.emitter.submit(lambda: run_event("START", spec))

    def finish(self, state: str, error: BaseException | str | None = None) -> None:
        message, stack = _error(error)
        spec, totals = self.spec, self._totals
        self.emitter.submit(lambda: run_event(state, spec, counts=totals, error=message, stack=stack))
        self.emitter.close(CLOSE_S)


def close_dead_run(stream: StreamSpec, run_id: str, why: str) -> int:
    """FAIL for a driver run that could not end itself (SIGKILLed, lost with its host), sent by whoever found
    it dead; the job's namespace from the environment only. The events sent (0 or 1)."""
    spec = RunSpec(str(uuid.UUID(run_id)), job_namespace({}, os.environ), f"rewind.{stream.name}", "STREAMING",
                   "STREAM", (), ())
    emitter = Emitter(OpenLineageClient(), name="rewind-lineage-dead-run")
    emitter.submit(lambda: run_event("FAIL", spec, error=why))
    emitter.close(CLOSE_S)
    return emitter.sent

