"""Ask the cluster manager about a stream's driver: the observer's part that talks to YARN's ResourceManager.

The status tells where (``status.cluster``: the ResourceManager's address, written by a driver YARN ran);
the ResourceManager tells which application of the stream is newest (by the stream's tag, so a relaunch
that has not reported yet is seen too) and what became of it; ``rewind.supervision.cluster_app.judge``
decides with the heartbeat. A ResourceManager that does not answer leaves the decision to the heartbeat
and the lease, as before: the supervisor must not restart a stream because it cannot ask.
"""

from __future__ import annotations

import logging

from rewind.control.status import StreamStatus
from rewind.runtime.yarn_rm import ResourceManagerClient, ResourceManagerUnreachable, YarnApp, stream_tag
from rewind.supervision.cluster_app import AppVerdict, judge

log = logging.getLogger(__name__)


def newest_app(status: StreamStatus | None, stream: str) -> tuple[YarnApp | None, ResourceManagerClient | None]:
    """The stream's newest YARN application and a client of its ResourceManager; (None, None) when the stream
    has no driver YARN ran (or the ResourceManager does not answer)."""
    rm = (status.cluster or {}).get("resourcemanager") if status is not None else None
    if not rm:
        return None, None
    client = ResourceManagerClient(rm, timeout_s=3.0)
    try:
        apps = client.apps(tag=stream_tag(stream))
    except ResourceManagerUnreachable as exc:
        log.warning("%s: %s; judging by the heartbeat alone", stream, exc)
        return None, None
    return (apps[0] if apps else None), client


def yarn_verdict(status: StreamStatus | None, stream: str, now: float, stale_after_s: float) -> AppVerdict | None:
    """YARN's word on the stream's driver, judged with its heartbeat; None when YARN has nothing to say."""
    app, client = newest_app(status, stream)
    if client is None or status is None:
        return None
    reported = app is not None and (status.cluster or {}).get("app_id") == app.app_id
    return judge(app, (now - status.heartbeat) if reported else None, stale_after_s)
