"""The actions on a proof's result: store it in the run directory and, given a store, in S3.

Why apart from the validation (as Great Expectations' checkpoints keep actions apart from the
run): where results go changes with the deployment, the verdict must not. What is written,
under ``run_dir`` and under ``s3://BUCKET/dq/STREAM/RUN_ID/``:

| file | what |
|---|---|
| ``validation_result.json`` | GE's results per suite, with the range and counts |
| ``data_docs/index.html`` | the Data Docs site (built by ``rewind.proof.gx``) |
| ``proof.json`` | the ``ProofResult``: verdict, failures with example rows, links, timings; written last |

An upload failure does not change the verdict: it is in ``ProofResult.s3_error`` and in the log text.
"""

from __future__ import annotations

import json
import logging
import mimetypes
from pathlib import Path
from typing import Any

from rewind.proof.report import ProofResult
from rewind.storage import S3Config, S3Storage

log = logging.getLogger(__name__)


def local_paths(run_dir: Path, docs_dir: Path) -> dict[str, str]:
    return {"run_dir": str(run_dir), "result": str(run_dir / "validation_result.json"),
            "proof": str(run_dir / "proof.json"), "data_docs": str(docs_dir / "index.html")}


def s3_prefix(stream: str, run_id: str) -> str:
    return f"dq/{stream}/{run_id}/"


def s3_store(s3: Any) -> Any:
    """``s3`` as a store: an ``rewind.storage.S3Config`` is opened, a store is kept, None stays None (local only)."""
    if s3 is None:
        return None

    return S3Storage(s3) if isinstance(s3, S3Config) else s3


def write_validation_result(result: ProofResult, suites: dict[str, Any]) -> None:
    Path(result.local["result"]).write_text(json.dumps(
        {"stream": result.stream, "run_id": result.run_id, "success": result.ok, "range": result.range,
         "counts": result.counts, "suites": suites}, indent=1, default=str))


def upload_results(store: Any, result: ProofResult, docs_dir: Path) -> None:
    """Upload the Data Docs and the validation result; set ``result.s3`` (links) and, on failure, ``s3_error``."""
    prefix = s3_prefix(result.stream, result.run_id)
    result.s3 = {"prefix": store.url(prefix), "result": store.url(prefix + "validation_result.json"),
                 "proof": store.url(prefix + "proof.json"), "data_docs": store.url(prefix + "data_docs/index.html")}
    try:
        _upload_dir(store, docs_dir, prefix + "data_docs/")
        store.write_bytes(prefix + "validation_result.json", Path(result.local["result"]).read_bytes(),
                        "application/json")
    except Exception as exc:  # noqa: BLE001 - S3Error/S3Unreachable and anything boto raises
        result.s3_error = f"{type(exc).__name__}: {exc}"
        log.warning("dq %s run %s: upload to %s failed: %s", result.stream, result.run_id, result.s3["prefix"], exc)


def write_proof(result: ProofResult) -> None:
    Path(result.local["proof"]).write_text(json.dumps(result.to_json(), indent=1))


def upload_proof(store: Any, result: ProofResult) -> None:
    """Upload ``proof.json`` unless an earlier upload failed (its error stands; a dead store is not waited on twice)."""
    if result.s3_error is not None:
        return
    try:
        store.write_bytes(s3_prefix(result.stream, result.run_id) + "proof.json",
                        Path(result.local["proof"]).read_bytes(), "application/json")
    except Exception as exc:  # noqa: BLE001
        result.s3_error = f"{type(exc).__name__}: {exc}"


def _upload_dir(store: Any, local: Path, prefix: str) -> int:
    n = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = f"{prefix}{path.relative_to(local).as_posix()}"
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        store.write_bytes(key, path.read_bytes(), ctype)
        n += 1
    return n
