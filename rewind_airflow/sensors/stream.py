"""The watch: a deferrable sensor over one stream, returning what the supervisor must do."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator

from rewind_airflow.triggers.health import StreamHealthTrigger


class StreamHealthSensor(BaseSensorOperator):
    """Defers to ``StreamHealthTrigger`` (no worker slot while the stream is healthy) and returns its
    event: ``{"action": "none" | "alert" | "restart", "cause", "detail", ...}``.

    :param stream: the registry stream to watch
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poll_s: seconds between looks (registry ``supervision.poll``)
    :param watch_s: how long one run watches a healthy stream before it returns ``action: none``
    :param thresholds: ``rewind.supervision.health.Thresholds`` keywords (registry ``supervision:``)
    """

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
        if event.get("action") == "none":
            self.log.info("%s healthy for the whole watch period: %s", self.stream, event.get("detail"))
        else:
            self.log.warning("%s: %s: %s: %s", self.stream, event.get("action"), event.get("cause"),
                             event.get("detail"))
        return event
