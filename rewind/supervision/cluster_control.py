"""Launch waits and stops of a driver YARN runs: what ``rewind.supervision.process_control`` does with a pid,
done with the ResourceManager.

Why: a driver in a YARN container has no process the launcher can wait on (spark-submit returns once YARN
accepted the application) and none it can signal from another host. What stands in for the process is the
application: found by the stream's tag, it says when the driver failed to start (with YARN's diagnostics
and where its logs are), and a kill through the ResourceManager ends a driver that hangs, or an application
that lingers after its driver stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rewind.control.status import StreamStatus
from rewind.registry import StreamSpec
from rewind.runtime.yarn_rm import FINAL_STATES, ResourceManagerClient, YarnApp, stream_tag
from rewind.supervision.cluster_app import stop_step
from rewind.supervision.cluster_observe import newest_app
from rewind.supervision.control_errors import StreamControlError, StreamFailed


def launched_app(client: ResourceManagerClient, stream: str, submitted_at: float) -> YarnApp | None:
    """The stream's application submitted at or after ``submitted_at`` (the newest), or None yet."""
    apps = client.apps(tag=stream_tag(stream))
    newest = apps[0] if apps else None
    return newest if newest is not None and newest.started_ms >= (submitted_at - 5) * 1000 else None


def wait_running_on_yarn(spec: StreamSpec, client: ResourceManagerClient, submitted_at: float, timeout: float,
                         read: Callable[[], StreamStatus | None]) -> tuple[StreamStatus, YarnApp]:
    """Wait until the driver of the application submitted at ``submitted_at`` reports running; its status and
    application. ``StreamFailed`` when YARN ends the application first (its diagnostics and logs named), or
    when its query fails."""

    deadline = time.monotonic() + timeout
    app: YarnApp | None = None
    while time.monotonic() < deadline:
        app = launched_app(client, spec.name, submitted_at) or app
        st = read()
        mine = st is not None and app is not None and (st.cluster or {}).get("app_id") == app.app_id
        if mine and st is not None and st.state == "running" and app is not None and app.state == "RUNNING":
            return st, app
        if mine and st is not None and st.state == "failed":
            raise StreamFailed("query_failed", f"stream {spec.name} failed while starting on YARN (last batch "
                                               f"{st.last_batch_id}): {st.exception}; {where(app)}")
        if app is not None and not app.active:
            raise StreamFailed("process_gone", f"stream {spec.name}: YARN application {app.app_id} ended "
                                               f"{app.state}/{app.final_status} during start-up: "
                                               f"{app.diagnostics.strip()[:1500]}; {where(app)}")
        time.sleep(1.0)
    found = f"application {app.app_id} {app.state}; {where(app)}" if app else \
        f"no application found by tag {stream_tag(spec.name)}"
    raise StreamControlError(f"stream {spec.name} not running on YARN after {timeout:.0f}s ({found})")


def where(app: YarnApp | None) -> str:
    """Where an operator reads what happened: the ApplicationMaster's logs, or its tracking UI."""
    if app is None:
        return "no YARN application"
    return f"its driver's logs: {app.am_container_logs or app.tracking_url or 'see the ResourceManager'}"


def kill_on_yarn(status: StreamStatus | None, stream: str, timeout: float = 60.0) -> YarnApp | None:
    """Kill the stream's newest active application through the ResourceManager and wait until YARN ends it;
    the application (None when YARN runs none of the stream's)."""

    app, client = newest_app(status, stream)
    if app is None or client is None or not app.active:
        return None
    client.kill(app.app_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = client.app(app.app_id)
        if now is None or now.state in FINAL_STATES:
            return now or app
        time.sleep(0.5)
    return client.app(app.app_id)


def finish_on_yarn(status: StreamStatus | None, stream: str, driver_stopped: bool, grace_s: float = 30.0) -> str:
    """After a graceful stop: wait for the stream's application to end on its own, and kill it through YARN if it
    lingers past ``grace_s``. Returns what happened (``rewind.supervision.cluster_app.stop_step``)."""

    started = time.monotonic()
    while True:
        app, _client = newest_app(status, stream)
        step = stop_step(app, driver_stopped, time.monotonic() - started, grace_s)
        if step == "done":
            return "ended" if app is not None else "no application"
        if step == "kill":
            killed = kill_on_yarn(status, stream)
            return f"killed through YARN ({killed.state if killed else 'gone'})"
        time.sleep(0.5)
