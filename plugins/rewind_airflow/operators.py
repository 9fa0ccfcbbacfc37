"""Operators of the supervisor: launch a stream, watch it (deferrable), run the recovery steps.

Thin: each calls into ``rewind`` (which decides) with what Airflow knows (connections).
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseHook, BaseOperator

from rewind_airflow.triggers import StreamHealthTrigger


def kafka_bootstrap(conn_id: str = "rewind_kafka") -> str:
    """The Airflow connection's host:port (extra ``bootstrap`` wins), else env / the embedded platform."""
    try:
        conn = BaseHook.get_connection(conn_id)
        extra = conn.extra_dejson or {}
        if extra.get("bootstrap"):
            return str(extra["bootstrap"])
        if conn.host:
            return f"{conn.host}:{conn.port}" if conn.port else str(conn.host)
    except Exception:  # noqa: BLE001 - connection not defined: fall back as the CLI does
        pass
    from rewind.settings import resolve_bootstrap

    return resolve_bootstrap(None)


def s3_store(conn_id: str = "rewind_s3") -> Any:
    """Savepoint storage from the Airflow connection (aws type: login/password, extra endpoint_url,
    bucket), else from the environment / the embedded platform."""
    from rewind.s3 import S3Config, S3Store, resolve_s3_config

    try:
        conn = BaseHook.get_connection(conn_id)
        extra = conn.extra_dejson or {}
        base = resolve_s3_config(extra.get("bucket"), require_bucket=False)
        cfg = S3Config(extra.get("bucket") or base.bucket, extra.get("endpoint_url") or base.endpoint,
                       conn.login or base.access_key, conn.password or base.secret_key,
                       extra.get("region_name") or base.region)
    except Exception:  # noqa: BLE001
        cfg = resolve_s3_config()
    return S3Store(cfg)


def launch(stream: str, registry: str | None, conn_id: str, wait_s: float) -> dict[str, Any]:
    """Start the stream through spark-submit (detached) and wait until its driver reports running."""
    from rewind.registry import load_registry
    from rewind.stream.control import default_log_path, wait_running

    from rewind_airflow.hooks import RewindStreamHook

    spec = load_registry(registry).get(stream)
    log_path = default_log_path(spec)
    started = time.time()
    submit_pid = RewindStreamHook(stream, registry, kafka_bootstrap(), conn_id=conn_id).launch_detached(log_path)
    st = wait_running(spec, submit_pid, wait_s, log_path, started_after=started)
    return {"pid": st.pid, "submit_pid": submit_pid, "launched_at": started, "running_at": time.time(),
            "log": str(log_path)}


class LaunchStreamOperator(BaseOperator):
    """Make sure the stream runs: leave a running one alone, otherwise spark-submit it (detached)."""

    template_fields = ("stream",)

    def __init__(self, *, stream: str, registry: str | None = None, conn_id: str = "spark_default",
                 wait_s: float = 240.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.registry, self.conn_id, self.wait_s = stream, registry, conn_id, wait_s

    def execute(self, context: Any) -> dict[str, Any]:
        from rewind.registry import load_registry
        from rewind.stream.control import stream_liveness
        from rewind.supervision.reconcile import check_not_given_up

        spec = load_registry(self.registry).get(self.stream)
        check_not_given_up(spec)
        live = stream_liveness(spec)
        if live.running:
            self.log.info("%s already running (%s): nothing to launch", self.stream, live.why)
            return {"pid": live.pid, "launched": False}
        self.log.info("%s is not running (%s): launching", self.stream, live.why)
        return {**launch(self.stream, self.registry, self.conn_id, self.wait_s), "launched": True}


class WatchStreamOperator(BaseOperator):
    """Defer to StreamHealthTrigger until the stream is unhealthy (or the watch period ends)."""

    template_fields = ("stream", "watch_s")

    def __init__(self, *, stream: str, registry: str | None = None, poll_s: float = 2.0, watch_s: float = 3600.0,
                 thresholds: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.registry, self.poll_s, self.watch_s = stream, registry, poll_s, watch_s
        self.thresholds = thresholds or {}

    def execute(self, context: Any) -> None:
        # watch_s may be a rendered template (a string)
        self.defer(trigger=StreamHealthTrigger(self.stream, self.registry, float(self.poll_s), float(self.watch_s),
                                               self.thresholds),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("healthy"):
            self.log.info("%s healthy for the whole watch period: %s", self.stream, event.get("detail"))
        else:
            self.log.warning("%s: detected %s: %s", self.stream, event.get("cause"), event.get("detail"))
        return event
