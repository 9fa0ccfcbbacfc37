"""Every per-stream path and DAG id, derived from the registry entry, in one place.

Why: the status file, the late-routing checks, the supervisor's memory, the replay lock, the logs,
the proof runs and replay reports, the checkpoint pointer and the DAG ids were each derived where
they were used; the command line put proofs under ``$REWIND_HOME`` while the DAGs put them beside
``status_dir``, so the Rewind page showed one and not the other. A stream's *home* is the parent
of its ``status_dir`` (``$REWIND_HOME`` in the default registry): logs, proof runs and replay reports
hang off it. The files of the control store (status, history, failures, late checks) are in
``control_dir``: beside the checkpoint by default, so every host that shares the checkpoint shares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


def control_dir(spec: Any) -> Path:
    """The directory of the stream's control store on this machine (``rewind.control.location``): its
    ``control`` directory, else ``<checkpoint>.control`` beside a local checkpoint. A stream whose store
    is in S3 keeps its local files (the late-routing checks) in ``status_dir``."""
    control = str(getattr(spec, "control", None) or "")
    if control and not control.startswith(("s3://", "s3a://")):
        return Path(control)
    checkpoint = str(spec.checkpoint).rstrip("/")
    if not control and "://" not in checkpoint:
        return Path(checkpoint + ".control")
    return Path(spec.status_dir)


def status_file(spec: Any) -> Path:
    """``<control dir>/<stream>.json``: the status a directory control store keeps (``control_dir``)."""
    return status_path(control_dir(spec), spec.name)


def status_path(status_dir: str | Path, stream: str) -> Path:
    """``<status_dir>/<stream>.json``: heartbeat, progress and lag, written by the running stream."""
    return Path(status_dir) / f"{stream}.json"


def history_path(status_file: Path) -> Path:
    """``<stream>.history.jsonl`` beside the status: one throughput/lag sample a line (the page's chart)."""
    return status_file.with_name(status_file.stem + ".history.jsonl")


def late_checks_path(status_file: Path) -> Path:
    """``<stream>.late.jsonl`` beside the status: per batch, routed vs dropped by the watermark."""
    return status_file.with_name(status_file.stem + ".late.jsonl")


def failures_path(status_dir: str | Path, stream: str) -> Path:
    """``<stream>.failures.json``: the supervisor's failures, alerts and give-up verdict."""
    return Path(status_dir) / f"{stream}.failures.json"


def replay_lock_path(status_dir: str | Path, stream: str) -> Path:
    """``<stream>.replay.json``: one replay per stream at a time (the ``replay`` lease of a one-host,
    directory control store: ``rewind.replay.guard``)."""
    return Path(status_dir) / f"{stream}.replay.json"


def pointer_path(checkpoint: str) -> Path:
    """``<checkpoint>.active.json``: where a restore pointed the stream (the checkpoint itself stays)."""
    return Path(f"{checkpoint.rstrip('/')}.active.json")


@dataclass(frozen=True)
class StreamPaths:
    name: str
    home: Path
    status: Path
    history: Path
    late_checks: Path
    failures: Path
    replay_lock: Path
    log: Path
    dq_runs: Path
    replays: Path
    pointer: Path

    def dq_run(self, run_id: str) -> Path:
        return self.dq_runs / run_id

    def replay_run(self, replay_id: str) -> Path:
        return self.replays / replay_id


def paths_of(spec: Any) -> StreamPaths:
    home = Path(spec.status_dir).parent
    where = control_dir(spec)
    status = status_path(where, spec.name)
    return StreamPaths(spec.name, home, status, history_path(status), late_checks_path(status),
                       failures_path(where, spec.name), replay_lock_path(where, spec.name),
                       home / "logs" / f"stream-{spec.name}.log", home / "dq" / spec.name,
                       home / "replays" / spec.name, pointer_path(spec.checkpoint))


@dataclass(frozen=True)
class DagIds:
    supervisor: str
    savepoint: str
    dq: str
    replay: str = "rewind_replay"  # one for every stream; restore is the savepoint DAG with action=restore
    upgrade: str = "rewind_upgrade"  # one for every stream (rewind stream upgrade's form)


def dag_ids(stream: str) -> DagIds:
    return DagIds(f"rewind_{stream}_supervisor", f"rewind_{stream}_savepoint", f"rewind_{stream}_dq")
