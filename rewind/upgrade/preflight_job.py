"""The pre-flight as a Spark job of its own: ``spark_jobs/preflight.py``, run through the stream's launch path.

Why a job: the process that upgrades need not have PySpark (an Airflow installed the MWAA way has
none: its task submits the job through the Spark provider, as a replay does), and Spark's log of a
refused pre-flight (its ERROR lines, py4j's stack) belongs in a file, not around the one line that
says why. The job runs ``rewind.upgrade.preflight.preflight`` and writes its outcome as JSON to the
file it is given: the report, or the refusal's class and message. The upgrade reads that file
(``read_outcome``) and refuses with the same class, naming the job's log.

``run_local`` is the command line's launch: the job as a child process of this Python, its output
to a log file. The Airflow task submits the same file with ``SparkSubmitHook``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.errors import EXIT_OK, EXIT_REFUSED, Refused
from rewind.registry import load_registry
from rewind.settings import python_path
from rewind.storage import S3Storage, resolve_s3_config
from rewind.storage.location import open_file
from rewind.upgrade.entry import load_candidate
from rewind.upgrade.preflight import PreflightReport, preflight
from rewind.upgrade.rules import Incompatible, UpgradeRefused

__all__ = ["JobFiles", "job_files", "job_main", "read_outcome", "run_local"]

_REFUSALS: dict[str, type[Refused]] = {"Incompatible": Incompatible, "UpgradeRefused": UpgradeRefused}


@dataclass(frozen=True)
class JobFiles:
    """One pre-flight job's arguments, the files that go with it, and where it writes its outcome."""

    args: list[str]
    files: list[Path]
    outcome: str  # a local path, or an ``s3://`` URL when the job runs in a YARN container


def job_files(prepared: Any, scratch: Path, registry: str, bootstrap: str, bucket: str | None = None, *,
              in_cluster: bool = False) -> JobFiles:
    """The job's arguments and files; the new entry is written beside ``scratch`` first (the job reads it as
    the command line's ``--registry-entry`` is read). ``in_cluster``: the job runs in a YARN container, on a
    node that sees none of this worker's paths: the registry and the entry go with it (named by their base
    names), its scratch is its container's, and its outcome goes to S3 (``bucket``), where the upgrade reads it."""
    entry, outcome = scratch.parent / "new-entry.yaml", scratch.parent / "preflight.json"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(prepared.req.entry_text)
    files = [Path(registry).resolve(), entry.resolve()]
    if in_cluster:
        if not bucket:
            raise UpgradeRefused("a pre-flight in a YARN container writes its outcome to S3: set the bucket "
                                 "(REWIND_S3_BUCKET, or the rewind_s3 connection's extra bucket)")
        where = f"s3://{bucket}/rewind/upgrades/{prepared.old.name}/{scratch.parent.name}/preflight.json"
        names, scratch_arg = [f.name for f in files], "preflight-scratch"
    else:
        where, names, scratch_arg = str(outcome), [str(f) for f in files], str(scratch)
    args = [prepared.old.name, "--registry", names[0], "--entry-file", names[1], "--bootstrap", bootstrap,
            "--scratch", scratch_arg, "--outcome", where, *(["--bucket", bucket] if bucket else [])]
    return JobFiles(args, files, where)


def _write(location: str, doc: dict[str, Any]) -> None:
    storage, name = open_file(location)
    storage.write_bytes(name, json.dumps(doc, default=str).encode(), "application/json")


def job_main(argv: list[str]) -> int:
    """spark-submit entry (``spark_jobs/preflight.py``): the pre-flight, its outcome written as JSON."""
    p = argparse.ArgumentParser(prog="preflight.py", description="The pre-flight of an upgrade (docs/upgrades.md).")
    p.add_argument("stream")
    p.add_argument("--registry", required=True)
    p.add_argument("--entry-file", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--outcome", required=True)
    p.add_argument("--bucket")
    args = p.parse_args(argv)
    try:
        old = load_registry(args.registry).get(args.stream)
        new = load_candidate(args.registry, args.stream, Path(args.entry_file).read_text(), args.entry_file)[3]
        report = preflight(old, new, S3Storage(resolve_s3_config(args.bucket)), args.bootstrap, Path(args.scratch))
        doc: dict[str, Any] = {"ok": True, "report": report.to_json()}
        code = EXIT_OK
    except Refused as exc:  # the whole story in this job's log (the upgrade's one line names it)
        traceback.print_exc()
        print(f"pre-flight refused: {exc}", file=sys.stderr, flush=True)
        doc, code = {"ok": False, "refused": type(exc).__name__, "message": str(exc)}, EXIT_REFUSED
    except Exception as exc:  # noqa: BLE001 - written for the upgrade to read; the traceback is in the log
        _write(args.outcome, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    _write(args.outcome, doc)
    return code


def read_outcome(outcome: str | Path, log: str) -> PreflightReport:
    """The report of a job that passed; else the refusal it wrote, raised with the log it names (a job
    that wrote nothing, or broke, is a refusal too: nothing was stopped). ``outcome``: a path or an S3 URL."""
    try:
        storage, name = open_file(outcome)
        doc = json.loads(storage.read_bytes(name))
    except Exception:  # noqa: BLE001 - missing or unreadable, local or in S3: the job wrote no outcome
        raise UpgradeRefused(f"the pre-flight job wrote no outcome ({outcome}); Spark's log: {log} -- the live "
                             "stream was not touched") from None
    if doc.get("ok"):
        r = doc["report"]
        return PreflightReport(r["savepoint_id"], int(r["savepoint_batch"]), r.get("batch_id"),
                               int(r.get("input_rows") or 0), float(r.get("seconds") or 0.0),
                               list(r.get("changes") or []), "", dict(r.get("newest") or {}),
                               int(r.get("newest_records") or 0))
    if doc.get("refused") in _REFUSALS:
        raise _REFUSALS[doc["refused"]](f"{doc['message']} (Spark's log: {log})")
    raise UpgradeRefused(f"the pre-flight job broke: {doc.get('error') or doc.get('message')} (Spark's log: {log}) "
                         "-- the live stream was not touched")


def run_local(args: list[str], log: Path) -> int:
    """The job as a child process of this Python (the command line's launch path), its output appended to ``log``."""
    from spark_jobs import PREFLIGHT_JOB

    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": python_path()}
    with open(log, "ab") as out:
        return subprocess.run([sys.executable, str(PREFLIGHT_JOB), *args], stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, check=False).returncode
