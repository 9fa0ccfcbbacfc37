"""The DQ proof as a task: run it, store it, fail the task with its text when it fails, skip it when the
stream has committed nothing yet."""

from __future__ import annotations

from typing import Any

from rewind_airflow.hooks.kafka import RewindKafkaHook
from rewind_airflow.hooks.s3 import RewindS3Hook
from rewind_airflow.operators.base import StreamOperator


def run_proof_task(name: str, registry: str, run_id: str | None = None) -> dict[str, Any]:
    """The Great Expectations proof for what the stream has committed; fails the task with the counts,
    example rows and links to the stored results and Data Docs; skips it before the first committed batch."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from rewind.paths import paths_of
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof
    from rewind.registry import load_registry
    from rewind.safe_names import run_dir_name

    spec = load_registry(registry).get(name)
    run_id = run_dir_name(run_id or get_current_context()["run_id"])
    try:
        store = RewindS3Hook().store()
    except Exception as exc:  # noqa: BLE001 - the proof still runs; results stay in the run dir
        print(f"no S3 for the results ({exc}): keeping them in the run dir only")
        store = None
    result = run_proof(spec, RewindKafkaHook().bootstrap(), run_dir=paths_of(spec).dq_run(run_id),
                       s3=store, run_id=run_id)
    text = format_proof(result)
    print(text)
    if result.nothing_to_prove:
        raise AirflowSkipException(text)
    if not result.ok:
        raise AirflowFailException(text)
    return {"ok": True, "counts": result.counts}


class ProveStreamOperator(StreamOperator):
    """The Great Expectations proof of what a stream has committed (``rewind.proof.dq.run_proof``).

    Succeeds when the proof passes; fails (no retry) with the verdict, counts, example rows and links
    when it fails; is skipped when the stream has committed no batch yet (nothing to prove, so no
    false alarm on a fresh start). Results and Data Docs go to the run dir and, through ``rewind_s3``,
    to S3.

    :param stream: the registry stream to prove
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    """

    def execute(self, context: Any) -> dict[str, Any]:
        return run_proof_task(self.stream, self.registry_file, context["run_id"])
