"""The lineage a driver or a replay gets: ``Lineage()`` (nothing) without a transport, else its events.

Why apart from ``config``: this is the one place that loads the OpenLineage client (``runs``), and only
after ``config.configured`` said a transport is there; a failure to set it up (a broken transport config)
turns lineage off for the run with one warning, never the run itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rewind import settings
from rewind.lineage.config import Lineage, configured

if TYPE_CHECKING:
    from rewind.registry import StreamSpec

__all__ = ["dead_run", "replay_lineage", "stream_lineage"]

log = logging.getLogger(__name__)


def _safely(what: str, make: Callable[[], Lineage]) -> Lineage:
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - lineage never stops a stream or a replay
        log.warning("OpenLineage off for %s: %s: %s", what, type(exc).__name__, exc)
        return Lineage()


def stream_lineage(spec: StreamSpec, bootstrap: str, spark: Any, run_id: str) -> Lineage:
    """The lineage of one driver run (``run_id``: a UUID), or ``Lineage()`` when no transport is configured.
    ``spark``: the session, whose conf holds the launching task's parent keys (``parent``)."""
    if not configured():
        return Lineage()
    from rewind.lineage.runs import StreamLineage  # lazy: the OpenLineage client only where a transport is set

    return _safely(spec.name, lambda: StreamLineage.create(spec, bootstrap, spark, run_id,
                                                           settings.lineage_interval_s()))


def replay_lineage(spec: StreamSpec, target: StreamSpec, bootstrap: str, spark: Any, replay_id: str) -> Lineage:
    """The lineage of one replay of ``spec`` into ``target``'s tables (the stream's own, or shadow tables)."""
    if not configured():
        return Lineage()
    from rewind.lineage.runs import ReplayLineage  # lazy: the OpenLineage client only where a transport is set

    return _safely(f"replay {replay_id}", lambda: ReplayLineage.create(spec, target, bootstrap, spark, replay_id))


def dead_run(spec: StreamSpec, run_id: str | None, why: str) -> None:
    """Close a dead driver's run with FAIL (the supervisor found it dead: it could not say so itself); ``run_id``
    is the driver id its status keeps. Nothing without a transport; a failure is logged, never raised."""
    if not run_id or not configured():
        return
    from rewind.lineage.runs import close_dead_run  # lazy: the OpenLineage client only where a transport is set

    try:
        close_dead_run(spec, run_id, why)
    except Exception as exc:  # noqa: BLE001 - lineage never stops a recovery
        log.warning("OpenLineage: the dead run %s of %s not closed: %s: %s", run_id, spec.name, type(exc).__name__,
                    exc)

