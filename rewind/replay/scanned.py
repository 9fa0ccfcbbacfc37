"""How many records a collected DataFrame read from its source: Spark's own scan metric, read after the job.

Why: a replay's chunk used to cache its source rows and count them before the transform ran, so that
the report could say how many records it read (a Kafka range's offsets are not its records: transaction
markers take offsets too). The cache cost a third of each chunk's Spark time, and a transform that
shares its parse across branches (the demo's ``_shared_by_every_branch``) reads the source once without
it. Spark counts the rows each scan produced (``numOutputRows``, what its UI shows per node); this reads
that count from the executed plan, so the chunk is read once, by the transform's own job.
"""

from __future__ import annotations

from typing import Any

__all__ = ["rows_scanned"]


def _leaves(node: Any, found: list[Any]) -> list[Any]:
    """The physical plan's leaves, through adaptive execution's wrappers (its query stages are leaves
    of their own; a reused exchange is not a scan and its rows were counted where they were made)."""
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":
        return _leaves(node.executedPlan(), found)
    if name.endswith("QueryStageExec"):
        return _leaves(node.plan(), found)
    children = node.children()
    if children.size() == 0:
        found.append(node)
    for i in range(children.size()):
        _leaves(children.apply(i), found)
    return found


def rows_scanned(collected: Any, source: Any) -> int | None:
    """The rows ``collected`` (a DataFrame whose action has run) read through the scan ``source`` plans
    (``source``: the DataFrame the transform was given); None when no scan of it carries the metric.

    A source scanned once per branch is counted once (the largest count: every scan of a bounded range
    reads all of it); scans of other relations (a static table a transform joins) are told apart by
    their node's name, which for Kafka names the range (``KafkaRelation(..., start=..., end=...)``)."""
    own = {leaf.nodeName() for leaf in _leaves(source._jdf.queryExecution().executedPlan(), [])}
    counts = []
    for leaf in _leaves(collected._jdf.queryExecution().executedPlan(), []):
        metric = leaf.metrics().get("numOutputRows")
        if leaf.nodeName() in own and metric.isDefined():
            counts.append(int(metric.get().value()))
    return max(counts) if counts else None
