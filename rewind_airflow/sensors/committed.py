"""Wait for a stream's first committed batch: the DQ DAG's first run must not prove a stream that has not started.

Why: the DQ DAG is hourly and active from the start, so its first run fires when the DAG appears,
before the stream it proves has committed anything; proving then reported every record in the topic
"missing". This sensor holds the proof until the stream's first committed batch (``rewind.proof.scope``),
deferring to the triggerer (no worker slot while it waits). If none comes before ``timeout``, it is skipped,
and so is the proof: nothing to prove is not a failure.

Why deferrable and not ``mode="reschedule"``: a rescheduling sensor is marked failed by Airflow's scheduler
when the executor's report of one poke arrives after the next poke was queued (apache/airflow#71172, open
in 3.3): on a loaded scheduler the DQ run failed on a fresh start, a false alarm (CI, 2026-11-29).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from rewind_airflow.triggers.committed import FirstBatchTrigger


class FirstBatchSensor(BaseSensorOperator):
    """Done once the stream has committed a batch (its status file, else its checkpoint's commit log); returns
    that batch's id. Skipped when none comes within ``timeout``.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poke_interval: seconds between looks (default 30)
    :param timeout: seconds to wait before the run is skipped (default 45 minutes, within the hour)
    """

    template_fields = ("stream",)

    def __init__(self, *, stream: str, registry: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 45 * 60)
        kwargs.setdefault("soft_fail", True)
        super().__init__(**kwargs)
        self.stream, self.registry = stream, registry

    def poke(self, context: Any) -> bool:
        return self._trigger().check() is not None

    def _trigger(self) -> FirstBatchTrigger:
        return FirstBatchTrigger(self.stream, self.registry, float(self.poke_interval), float(self.timeout))

    def execute(self, context: Any) -> int | None:
        trigger = self._trigger()
        batch = trigger.check()
        if batch is not None:
            self.log.info("%s has committed batch %s: proving", self.stream, batch)
            return batch
        self.log.info("%s has not committed a batch yet: nothing to prove; waiting up to %ss in the triggerer",
                      self.stream, self.timeout)
        # Airflow's own deferral timeout only as a backstop: the trigger fires its own timeout first.
        self.defer(trigger=trigger, method_name="execute_complete",
                   timeout=timedelta(seconds=float(self.timeout) + 10 * float(self.poke_interval)))
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> int:
        if event.get("batch") is None:
            raise AirflowSkipException(f"{self.stream} committed no batch within {event.get('waited_s')}s: "
                                       "nothing to prove")
        self.log.info("%s has committed batch %s after %ss: proving", self.stream, event["batch"],
                      event.get("waited_s"))
        return int(event["batch"])
