"""The supervisor DAG's tasks: launch, then (after the watch) diagnose, recover, relaunch, chain.

Each task is one step of the supervision loop in ``rewind.supervision`` (observe -> evaluate ->
reconcile), run as its own task so that the UI shows where a recovery stands. Refusals (a
crash-loop verdict, a second driver on a checkpoint) fail a task without retries
(``rewind_airflow.errors``).
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseOperator

from rewind_airflow.errors import fail_without_retry_on_refusal
from rewind_airflow.hooks.kafka import RewindKafkaHook
from rewind_airflow.hooks.s3 import RewindS3Hook


def launch(stream: str, registry: str | None, conn_id: str, wait_s: float) -> dict[str, Any]:
    """spark-submit the stream (detached, or into YARN when the Spark connection says cluster mode) and wait
    until its driver reports running; refused while a driver of the stream is alive
    (``rewind.supervision.process_control.ensure_no_driver``)."""
    from rewind.registry import load_registry
    from rewind.supervision.process_control import default_log_path, ensure_no_driver, wait_running
    from rewind_airflow.hooks.stream import RewindStreamHook

    spec = load_registry(registry).get(stream)
    ensure_no_driver(spec)
    hook = RewindStreamHook(stream, registry, RewindKafkaHook().bootstrap(), conn_id=conn_id)
    if hook.is_yarn_cluster():  # the driver runs in a YARN container, not on this worker
        from rewind_airflow.operators.cluster import launch_on_yarn

        return launch_on_yarn(hook, wait_s)
    log_path = default_log_path(spec)
    started = time.time()
    submit_pid = hook.launch_detached(log_path)
    st = wait_running(spec, submit_pid, wait_s, log_path, started_after=started)
    return {"pid": st.pid, "submit_pid": submit_pid, "launched_at": started, "running_at": time.time(),
            "log": str(log_path)}


def launch_standby(stream: str, registry: str | None, conn_id: str) -> dict[str, Any]:
    """spark-submit a warm standby (``rewind stream run --standby``, detached) when the registry asks
    for one (``supervision.standby``) and none is there; it takes over when the driver's process dies."""
    from rewind.control.driver_lease import read_standby
    from rewind.paths import paths_of
    from rewind.registry import load_registry
    from rewind_airflow.hooks.stream import RewindStreamHook

    spec = load_registry(registry).get(stream)
    if not spec.supervision.standby:
        return {}
    there = read_standby(spec)
    if there:
        return {"standby_pid": there["pid"], "standby_launched": False}
    hook = RewindStreamHook(stream, registry, RewindKafkaHook().bootstrap(), conn_id=conn_id, standby=True)
    if hook.is_yarn_cluster():
        from rewind_airflow.operators.cluster import launch_on_yarn

        return launch_on_yarn(hook, 0.0)
    log_path = paths_of(spec).log.with_suffix(".standby.log")
    pid = hook.launch_detached(log_path)
    return {"standby_submit_pid": pid, "standby_launched": True, "standby_log": str(log_path)}


class LaunchStreamOperator(BaseOperator):
    """Make sure the stream runs: leave a running one alone, otherwise spark-submit it (detached);
    then, when the registry asks for it (``supervision.standby``), a warm standby beside it.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param conn_id: the Spark connection spark-submit uses
    :param wait_s: how long to wait for the driver to report running
    """

    template_fields = ("stream",)

    def __init__(self, *, stream: str, registry: str | None = None, conn_id: str = "spark_default",
                 wait_s: float = 240.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.registry, self.conn_id, self.wait_s = stream, registry, conn_id, wait_s

    def execute(self, context: Any) -> dict[str, Any]:
        from rewind.registry import load_registry
        from rewind.supervision.failures import check_not_given_up
        from rewind.supervision.process_control import stream_liveness
        from rewind.supervision.reconcile import recover_unseen_death
        from rewind.upgrade.guard import describe, wait_until_done

        spec = load_registry(self.registry).get(self.stream)
        with fail_without_retry_on_refusal():
            upgraded = wait_until_done(spec)  # an upgrade launches and watches the stream itself
            if upgraded:
                self.log.info("%s: waited for %s", self.stream, describe(upgraded))
                spec = load_registry(self.registry).get(self.stream)
            check_not_given_up(spec)
            live = stream_liveness(spec)
            if live.running:
                self.log.info("%s already running (%s): nothing to launch", self.stream, live.why)
                done: dict[str, Any] = {"pid": live.pid, "launched": False}
            else:
                found = recover_unseen_death(spec, _savepoint_store)
                if found:
                    self.log.warning("%s died with no watch looking: recorded (%s); checkpoint: %s", self.stream,
                                     found["decision"], found["checkpoint"]["action"])
                self.log.info("%s is not running (%s): launching", self.stream, live.why)
                done = {**launch(self.stream, self.registry, self.conn_id, self.wait_s), "launched": True,
                        **({"found_dead": found} if found else {})}
        standby = launch_standby(self.stream, self.registry, self.conn_id)
        if standby:
            self.log.info("%s: standby %s", self.stream, standby)
        return {**done, **standby}


def reset_if_asked(name: str, registry: str, params: dict[str, Any]) -> None:
    from rewind.registry import load_registry
    from rewind.supervision.failures import reset

    if params.get("reset"):
        before = reset(load_registry(registry).get(name))
        print(f"reset: cleared {len(before['failures'])} failure(s), give-up verdict {before.get('gave_up')}")


def diagnose(name: str, registry: str, event: dict[str, Any]) -> dict[str, Any]:
    """Act on the watch's verdict: nothing (skip), an alert (fail this run, visibly; no restart), or the
    first half of a restart (stop a hung driver, record the failure, ask the restart strategy)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from rewind.registry import load_registry
    from rewind.supervision.health import Health, Verdict
    from rewind.supervision.reconcile import alert, begin_restart

    action = event.get("action", "none")
    if action == "none":
        raise AirflowSkipException(f"nothing to do: {event.get('reason') or event.get('detail')}")
    spec = load_registry(registry).get(name)
    from rewind.upgrade.guard import describe, wait_until_done

    upgraded = wait_until_done(spec)
    if upgraded:  # the upgrade stopped the stream on purpose, then launched and watched it itself
        raise AirflowSkipException(f"{describe(upgraded)} held the stream (it stops, launches and watches it "
                                   f"itself); nothing to do: {event.get('cause')} was its doing")
    verdict = Verdict(Health(False, event["cause"], event["detail"]), action, bool(event.get("stop_first")),
                      event.get("reason", ""))
    if action == "alert":
        raise AirflowFailException(alert(spec, verdict, event["detected_at"]))
    decision = begin_restart(spec, verdict, now=event["detected_at"])
    print(f"failure: {event['cause']}: {event['detail']}\ndecision: {decision.reason}")
    if not decision.restart:
        raise AirflowFailException(decision.reason)
    st = event.get("status") or {}
    return {"cause": event["cause"], "detected_at": event["detected_at"], "delay_s": decision.delay_s,
            "attempt": decision.attempt, "after_batch": st.get("last_batch_id")}


def _savepoint_store() -> Any:
    try:
        return RewindS3Hook().store()
    except Exception as exc:  # noqa: BLE001 - repair needs no S3; a restore would say so
        print(f"no savepoint storage ({exc}): a restore will not be possible")
        return None


def recover_checkpoint(name: str, registry: str) -> dict[str, Any]:
    """Nothing, repair in place, or restore the newest valid savepoint."""
    from rewind.registry import load_registry
    from rewind.supervision.reconcile import recover_checkpoint as recover

    with fail_without_retry_on_refusal():
        result = recover(load_registry(registry).get(name), _savepoint_store())
    print(f"checkpoint: {result['action']}: {result}")
    return result


def relaunch(name: str, registry: str, failure: dict[str, Any], checkpoint: dict[str, Any],
             conn_id: str = "spark_default") -> dict[str, Any]:
    """Relaunch until a new batch commits, as the restart strategy allows; fails loudly (no retry)
    when it gives up."""
    from rewind.registry import load_registry
    from rewind.supervision.reconcile import relaunch_until_progress

    with fail_without_retry_on_refusal():
        started = relaunch_until_progress(load_registry(registry).get(name),
                                          lambda: launch(name, registry, conn_id, 240.0),
                                          failure["after_batch"], failure["delay_s"])
    timings = {"detect_to_relaunch_s": started["launched_at"] - failure["detected_at"],
               "detect_to_running_s": started["running_at"] - failure["detected_at"],
               "detect_to_first_batch_s": time.time() - failure["detected_at"]}
    print(f"recovered after {failure['cause']}: {timings}, first batch {started['first_batch']}, "
          f"{started['relaunches']} launch(es)")
    return {**started, **timings, "checkpoint_action": checkpoint["action"], **launch_standby(name, registry, conn_id)}


def chain_enabled(name: str, registry: str, params: dict[str, Any]) -> bool:
    """Keep watching a stream that runs, whatever this run's tasks did: a failed proof, an alert or a
    transient task error fails the run visibly but must not leave the stream unsupervised. No next
    run when the strategy gave up (crash loop), the stream was never launched, stopped, or its launch
    failed: those need a person, and chaining would only repeat the failure. A driver whose lease
    lapsed since this run's tasks (killed, or paused on a host cut off) is chained: the next run's
    launch records it as a failure the strategy counts and brings the stream back."""
    from rewind.registry import load_registry
    from rewind.supervision.observe import observe

    if not params.get("chain", True):
        return False
    obs = observe(load_registry(registry).get(name))
    if obs.gave_up:
        print(f"not chaining: the supervisor gave up ({obs.gave_up['reason']}); after the fix: "
              f"rewind supervisor reset {name}")
        return False
    st = obs.status
    if st is None or st.state in ("stopped", "failed"):
        print(f"not chaining: no running driver for {name} (status: {st.state if st else 'none'})")
        return False
    if not obs.driver_alive:
        print(f"chaining: {name}'s driver is gone since (status {st.state}, its lease lapsed); the next run's "
              "launch records it and brings the stream back")
    return True
