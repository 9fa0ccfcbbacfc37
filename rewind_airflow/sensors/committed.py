"""Wait for a stream's first committed batch: the DQ DAG's first run must not prove a stream that has not started.

Why: the DQ DAG is hourly and active from the start, so its first run fires when the DAG appears,
before the stream it proves has committed anything; proving then reported every record in the topic
"missing". This sensor holds the proof until the stream's first committed batch (``rewind.proof.scope``),
rescheduling itself (no worker slot while it waits). If none comes before ``timeout``, it is skipped
(``soft_fail``), and so is the proof: nothing to prove is not a failure.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator


class FirstBatchSensor(BaseSensorOperator):
    """Done once the stream has committed a batch (its status file, else its checkpoint's commit log).

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poke_interval: seconds between looks (default 30)
    :param timeout: seconds to wait before the run is skipped (default 45 minutes, within the hour)
    """

    template_fields = ("stream",)

    def __init__(self, *, stream: str, registry: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 45 * 60)
        kwargs.setdefault("soft_fail", True)
        super().__init__(**kwargs)
        self.stream, self.registry = stream, registry

    def poke(self, context: Any) -> bool:
        from rewind.proof.scope import committed_batch
        from rewind.registry import load_registry

        batch = committed_batch(load_registry(self.registry).get(self.stream))
        if batch is None:
            self.log.info("%s has not committed a batch yet: nothing to prove; looking again in %ss", self.stream,
                          self.poke_interval)
            return False
        self.log.info("%s has committed batch %s: proving", self.stream, batch)
        return True
