"""OpenLineage run events built from plain data: START, RUNNING, COMPLETE, FAIL and ABORT of one run.

Why pure: what a backend shows of a stream (which topics feed which tables, how many rows the last batch
moved, why a run failed) is decided here, and tested without a client, a transport or Spark. The events are
the client's own classes (``openlineage.client.event_v2``), so the client serializes them and its transports
send them as they send any integration's.

Every event of a run carries the whole run: its inputs and outputs, the ``jobType`` job facet (``STREAMING``
for a driver, ``BATCH`` for a replay; integration ``REWIND``), the ``parent`` run facet when the launching
task said one (``rewind.lineage.parent``) and the ``processing_engine`` (Spark's version). A RUNNING or
final event with a batch's figures adds ``inputStatistics`` to each topic and ``outputStatistics`` to each
table; the outputs carry their ``schema``; FAIL and ABORT carry ``errorMessage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    error_message_run,
    input_statistics_input_dataset,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
)

from rewind import __version__
from rewind.lineage.parent import Parent

__all__ = ["PRODUCER", "Counts", "Dataset", "RunSpec", "run_event", "topic_rows"]

#: The producer URI of every event and facet: Rewind and its version.
PRODUCER = f"urn:rewind:{__version__}"
INTEGRATION = "REWIND"
STATES = ("START", "RUNNING", "COMPLETE", "FAIL", "ABORT")


@dataclass(frozen=True)
class Dataset:
    """One input or output: its OpenLineage namespace and name, the sink table it is (outputs), its columns."""

    namespace: str
    name: str
    table: str | None = None
    fields: tuple[tuple[str, str], ...] = ()  # (column, type): the schema facet


@dataclass(frozen=True)
class RunSpec:
    """What every event of one run says: the run, the job, its datasets, its parent."""

    run_id: str
    namespace: str
    job_name: str
    processing: str  # STREAMING (a driver) or BATCH (a replay)
    job_type: str  # STREAM or REPLAY
    inputs: tuple[Dataset, ...]
    outputs: tuple[Dataset, ...]
    parent: Parent | None = None
    engine_version: str | None = None
    interval_s: float | None = None  # a streaming run's RUNNING period


@dataclass(frozen=True)
class Counts:
    """A batch's figures: rows read per input (dataset name) and written per output (sink table)."""

    batch_id: int | None = None
    inputs: Mapping[str, int] = field(default_factory=dict)
    outputs: Mapping[str, int] = field(default_factory=dict)


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, dict):
        return {}
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in raw.items() if isinstance(parts, dict)}


def topic_rows(topics: list[str], num_input_rows: int, start: Any, end: Any) -> dict[str, int]:
    """Rows a batch read per topic. One topic: Spark's ``numInputRows``. Several: each topic's offsets span
    from the batch's start to its end (Spark counts rows per source, not per topic; a span counts Kafka's
    transaction markers too)."""
    if len(topics) == 1:
        return {topics[0]: int(num_input_rows)}
    before, after = _offsets(start), _offsets(end)
    return {t: sum(max(0, o - before.get(t, {}).get(p, o)) for p, o in after.get(t, {}).items()) for t in topics}


def _job(spec: RunSpec) -> Job:
    emission = None
    if spec.interval_s:
        emission = job_type_job.EmissionPattern(eventTrigger="PERIODIC", eventContentMode="ACCUMULATIVE",
                                                windowDuration=max(1, round(spec.interval_s)))
    facet = job_type_job.JobTypeJobFacet(processingType=spec.processing, integration=INTEGRATION,
                                         jobType=spec.job_type, emissionPattern=emission, producer=PRODUCER)
    return Job(namespace=spec.namespace, name=spec.job_name, facets={"jobType": facet})


def _parent(parent: Parent) -> parent_run.ParentRunFacet:
    root = None
    if parent.has_root:
        root = parent_run.Root(run=parent_run.RootRun(runId=str(parent.root_run_id)),
                               job=parent_run.RootJob(namespace=str(parent.root_namespace),
                                                      name=str(parent.root_name)))
    return parent_run.ParentRunFacet(run=parent_run.Run(runId=parent.run_id),
                                     job=parent_run.Job(namespace=parent.namespace, name=parent.name),
                                     root=root, producer=PRODUCER)


def _run(spec: RunSpec, error: str | None, stack: str | None) -> Run:
    facets: dict[str, Any] = {}
    if spec.parent is not None:
        facets["parent"] = _parent(spec.parent)
    if spec.engine_version:
        facets["processing_engine"] = processing_engine_run.ProcessingEngineRunFacet(
            version=spec.engine_version, name="spark", openlineageAdapterVersion=__version__, producer=PRODUCER)
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python", stackTrace=stack, producer=PRODUCER)
    return Run(runId=spec.run_id, facets=facets)


def _output(d: Dataset, rows: int | None) -> OutputDataset:
    facets: dict[str, Any] = {}
    if d.fields:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in d.fields], producer=PRODUCER)
    stats: dict[str, Any] = {}
    if rows is not None:
        stats["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=int(rows), producer=PRODUCER)
    return OutputDataset(namespace=d.namespace, name=d.name, facets=facets, outputFacets=stats)


def _input(d: Dataset, rows: int | None) -> InputDataset:
    stats: dict[str, Any] = {}
    if rows is not None:
        stats["inputStatistics"] = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
            rowCount=int(rows), producer=PRODUCER)
    return InputDataset(namespace=d.namespace, name=d.name, inputFacets=stats)


def run_event(state: str, spec: RunSpec, at: datetime | None = None, counts: Counts | None = None,
              error: str | None = None, stack: str | None = None) -> RunEvent:
    """One event of the run: ``state`` one of ``STATES``; ``counts`` the last batch's (or the whole replay's)
    figures; ``error`` (FAIL, ABORT) the message of the ``errorMessage`` facet."""
    if state not in STATES:
        raise ValueError(f"unknown OpenLineage run state {state!r}: one of {STATES}")
    when = (at or datetime.now(UTC)).astimezone(UTC).isoformat()
    ins = counts.inputs if counts is not None else {}
    outs = counts.outputs if counts is not None else {}
    return RunEvent(eventType=RunState[state], eventTime=when, run=_run(spec, error, stack), job=_job(spec),
                    inputs=[_input(d, ins.get(d.name)) for d in spec.inputs],
                    outputs=[_output(d, outs.get(d.table or d.name)) for d in spec.outputs], producer=PRODUCER)
