"""The DQ proof as a task: run it, store it, fail the task with its text when it fails."""

from __future__ import annotations

from typing import Any

from rewind_airflow.hooks.kafka import RewindKafkaHook
from rewind_airflow.hooks.s3 import RewindS3Hook


def run_proof_task(name: str, registry: str) -> dict[str, Any]:
    """The Great Expectations proof for what the stream has committed; fails the task with the counts,
    example rows and links to the stored results and Data Docs."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.paths import paths_of
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof
    from rewind.registry import load_registry
    from rewind.safe_names import run_dir_name

    spec = load_registry(registry).get(name)
    run_id = run_dir_name(get_current_context()["run_id"])
    try:
        store = RewindS3Hook().store()
    except Exception as exc:  # noqa: BLE001 - the proof still runs; results stay in the run dir
        print(f"no S3 for the results ({exc}): keeping them in the run dir only")
        store = None
    result = run_proof(spec, RewindKafkaHook().bootstrap(), run_dir=paths_of(spec).dq_run(run_id),
                       s3=store, run_id=run_id)
    text = format_proof(result)
    print(text)
    if not result.ok:
        raise AirflowFailException(text)
    return {"ok": True, "counts": result.counts}
