"""The savepoint DAG's tasks: take a savepoint, apply retention, restore one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rewind_airflow.hooks.s3 import RewindS3Hook
from rewind_airflow.operators.base import StreamOperator


def take_savepoint(name: str, registry: str) -> dict[str, Any]:
    """An online savepoint of the last complete batch; skipped (not failed) before the first batch."""
    from airflow.sdk.exceptions import AirflowSkipException

    from rewind.checkpoints.savepoint_errors import NothingToSave
    from rewind.checkpoints.savepoints import create_savepoint
    from rewind.registry import load_registry

    try:
        m = create_savepoint(load_registry(registry).get(name), RewindS3Hook().store())
    except NothingToSave as exc:  # a schedule that fires before the first batch: not a failure
        raise AirflowSkipException(str(exc)) from None
    print(f"savepoint {m.savepoint_id}: batch {m.batch_id}, {len(m.files)} files, {m.total_bytes} bytes, "
          f"offsets {m.offsets}")
    return {"savepoint_id": m.savepoint_id, "batch_id": m.batch_id, "bytes": m.total_bytes}


def apply_retention(name: str, registry: str) -> dict[str, Any]:
    """The registry's retention (keep_last, max_age); never the newest savepoint."""
    from rewind.checkpoints.retention import plan_prune
    from rewind.checkpoints.savepoints import apply_prune, list_savepoints
    from rewind.registry import load_registry, parse_duration

    spec_ = load_registry(registry).get(name)
    store = RewindS3Hook().store()
    plan = plan_prune(list_savepoints(store, name), spec_.savepoints.keep_last,
                      parse_duration(spec_.savepoints.max_age), datetime.now(UTC))
    apply_prune(store, name, plan)
    deleted = [m.savepoint_id for m in plan.delete]
    print(f"retention: deleted {deleted}, kept {[m.savepoint_id for m in plan.keep]}")
    return {"deleted": deleted}


def restore_task(name: str, registry: str, savepoint_id: str, relaunch: bool, store: Any = None,
                 conn_id: str = "spark_default") -> dict[str, Any]:
    """Restore one savepoint: check the id and that it exists (nothing is touched before), stop the stream
    after its current batch, download and verify into a fresh checkpoint, point the stream at it, and
    launch it again (also when the restore was refused, if it had been running)."""
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.checkpoints.savepoint_errors import SavepointError
    from rewind.checkpoints.savepoints import load_manifest, restore_savepoint
    from rewind.registry import load_registry
    from rewind.safe_names import UnsafeName, check_savepoint_id
    from rewind.supervision.observe import running_reason
    from rewind.supervision.process_control import stop_stream, stream_liveness

    try:
        sid = check_savepoint_id(savepoint_id)
    except UnsafeName as exc:
        raise AirflowFailException(f"restore refused: {exc}; nothing was stopped or changed") from None
    spec = load_registry(registry).get(name)
    store = store if store is not None else RewindS3Hook().store()
    try:
        manifest = load_manifest(store, name, sid)
    except SavepointError as exc:
        raise AirflowFailException(f"restore refused: {exc}; nothing was stopped or changed") from None
    print(f"restoring {name} to savepoint {sid} (batch {manifest.batch_id}, offsets {manifest.offsets})")
    was_running = stop_stream(spec, timeout=120)
    print(f"{name} stopped after its current batch" if was_running else f"{name} was not running")
    result = None
    try:
        result = restore_savepoint(spec, store, sid, running=running_reason(spec))
    except SavepointError as exc:
        raise AirflowFailException(f"restore of {sid} refused: {exc}") from None
    finally:
        launched = None
        if relaunch and (was_running or result is not None) and not stream_liveness(spec).running:
            from rewind_airflow.operators.supervision import launch

            launched = launch(name, registry, conn_id, 240.0)
            print(f"{name} launched again: {launched}")
    for warning in result.warnings:
        print(f"warning: {warning}")
    print(f"restored {sid} into {result.path} in {result.seconds:.1f}s; {name} resumes at {manifest.offsets}")
    return {"savepoint_id": sid, "batch_id": manifest.batch_id, "path": str(result.path),
            "was_running": was_running, "launched": bool(launched)}


class SavepointOperator(StreamOperator):
    """An online savepoint of a stream's last complete batch to S3 (``rewind.checkpoints.savepoints``).

    Skipped, not failed, before the stream's first complete batch. Returns the savepoint's id, batch
    and size.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    """

    def execute(self, context: Any) -> dict[str, Any]:
        return take_savepoint(self.stream, self.registry_file)


class SavepointRetentionOperator(StreamOperator):
    """The registry's savepoint retention (``keep_last``, ``max_age``); the newest savepoint is always kept.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    """

    def execute(self, context: Any) -> dict[str, Any]:
        return apply_retention(self.stream, self.registry_file)


class RestoreSavepointOperator(StreamOperator):
    """Restore a savepoint: check it exists (nothing is touched before), stop the stream after its current
    batch, download and verify it into a fresh checkpoint, point the stream at it, launch it again.

    :param stream: the registry stream
    :param savepoint_id: the savepoint to restore (templated: e.g. ``{{ params.savepoint_id }}``)
    :param relaunch: launch the stream again afterwards (also when the restore was refused, if it ran)
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param conn_id: the Spark connection the relaunch spark-submits with
    """

    template_fields = ("stream", "savepoint_id", "relaunch")

    def __init__(self, *, stream: str, savepoint_id: str, relaunch: bool | str = True, registry: str | None = None,
                 conn_id: str = "spark_default", **kwargs: Any) -> None:
        super().__init__(stream=stream, registry=registry, **kwargs)
        self.savepoint_id, self.relaunch, self.conn_id = savepoint_id, relaunch, conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        relaunch = self.relaunch if isinstance(self.relaunch, bool) else str(self.relaunch).lower() != "false"
        return restore_task(self.stream, self.registry_file, self.savepoint_id or "", relaunch, conn_id=self.conn_id)

