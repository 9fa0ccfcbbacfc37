"""The replay report: what a replay read, wrote, skipped and recomputed, and what the proof said.

It is stored as ``report.json`` in the replay's run directory and in S3 at
``replays/<stream>/<replay_id>/report.json``, also when the replay failed (then ``status`` and
``error`` say how far it got), so an on-call engineer always finds the outcome. No Airflow here:
the DAG task and ``rewind replay run`` both log ``format_report``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rewind.errors import Failed, ProofViolation
from rewind.replay.aggregates import classes_text
from rewind.storage import S3Config, S3Storage

log = logging.getLogger(__name__)


@dataclass
class ReplayReport:
    replay_id: str
    stream: str
    mode: str                       # into-sink | shadow
    status: str                     # running | ok | proof_failed | failed
    started_at: str
    plan: dict[str, Any]
    sink: dict[str, Any]            # masked url, prefix, physical tables written
    finished_at: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    windows: dict[str, Any] = field(default_factory=dict)  # the first aggregate table's outcome (as before)
    aggregates: dict[str, Any] = field(default_factory=dict)  # aggregate table -> rewind.replay.aggregates outcome
    chunks: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)
    proof: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_json(cls, obj: dict[str, Any] | str) -> "ReplayReport":
        d = json.loads(obj) if isinstance(obj, str) else dict(obj)
        return cls(**d)


class ReplayFailed(Failed):
    """The replay did not complete (a Spark, Kafka or sink error); ``report`` says how far it got."""

    def __init__(self, message: str, report: ReplayReport) -> None:
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.report))


class ReplayProofFailed(ProofViolation, ReplayFailed):
    """The replay wrote its range but the DQ proof over it failed; the message is the report.

    A ``ProofViolation`` first (its exit code, no retry: the data disproves the guarantee), and a
    ``ReplayFailed`` too, so it carries the report like any replay that did not end well."""


def s3_key(stream: str, replay_id: str) -> str:
    return f"replays/{stream}/{replay_id}/report.json"


def store_report(report: ReplayReport, run_dir: Path, s3: Any = None) -> ReplayReport:
    """Write ``report.json`` under ``run_dir`` and, given an S3 store, upload it (a failed upload is
    noted in the report, never raised: the local copy and the log still hold the outcome)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "report.json"
    report.artifacts["report"] = str(path)
    store = _store(s3)
    if store is not None:
        report.artifacts["report_s3"] = store.url(s3_key(report.stream, report.replay_id))
    text = json.dumps(report.to_json(), indent=1)
    path.write_text(text)
    if store is not None:
        try:
            store.write_bytes(s3_key(report.stream, report.replay_id), text.encode(), "application/json")
        except Exception as exc:  # noqa: BLE001 - S3Error/S3Unreachable and anything boto raises
            report.artifacts.pop("report_s3", None)
            report.notes.append(f"the report was not stored in S3: {type(exc).__name__}: {exc}")
            log.warning("replay %s: report upload failed: %s", report.replay_id, exc)
            path.write_text(json.dumps(report.to_json(), indent=1))
    return report


def _store(s3: Any) -> Any:
    if s3 is None:
        return None

    return S3Storage(s3) if isinstance(s3, S3Config) else s3


def _ranges(plan: dict[str, Any]) -> str:
    return ", ".join(f"{p['topic']}[{p['partition']}] [{p['start']}, {p['end']})" for p in plan.get("partitions", []))


def _aggregate_text(w: dict[str, Any]) -> str:
    """One aggregate table's outcome: its touched groups as a sum of their classes, then the horizon."""

    tail = f"(closed up to {w.get('horizon')}: {w.get('horizon_source')})"
    if "rewritten" in w:
        return f"{classes_text(w)}; closed groups recomputed from all their records (every partition, the whole " \
            f"window) {tail}"
    # a report written before the classes (no ``rewritten``): its counts as they were
    return (f"{w.get('touched', w.get('affected'))} groups touched by the range, {w.get('recomputed')} recomputed "
            f"from all their records (every partition, the whole window), {w.get('written')} written, "
            f"{w.get('unchanged')} already right, "
            + (f"{w.get('removed')} removed (copies in {w.get('removed_to')}), " if w.get("removed") else "")
            + (f"{w.get('unsupported_left')} that no record makes LEFT (the sink cannot delete), "
               if w.get("unsupported_left") else "")
            + f"{w.get('left_open')} left open for the live stream, {w.get('left_alone', 0)} left alone (records "
            f"past retention) {tail}")


def format_report(r: ReplayReport) -> str:
    """The report for a terminal or a task log: verdict first, then counts, windows, proof, where."""
    verdict = {"ok": "OK: range replayed and proven", "proof_failed": "FAILED: the DQ proof over the range failed",
               "failed": f"FAILED: {r.error}", "running": "RUNNING"}.get(r.status, r.status)
    c, w = r.counts, r.windows
    lines = [f"replay {r.replay_id} of stream {r.stream!r} ({r.mode}): {verdict}",
             f"range: {_ranges(r.plan)} (from {r.plan.get('from')} to {r.plan.get('to')})",
             f"sink: {r.sink.get('url')} tables {', '.join(r.sink.get('tables', {}).values())}"]
    if c:
        w_tab, skip = c.get("written", {}), c.get("already_present", {})
        late = (f"{c.get('late', 0)} behind the watermark ("
                + (f"{c.get('late_reprocessed', 0)} brought back as rows" if c.get("late_reprocessed") else
                   "left dead letters; --reprocess-late brings them back") + ")")
        lines.append(f"read: {c.get('records_read')} records (planned {c.get('records_planned')}) in "
                     f"{len(r.chunks)} chunk(s); out: {c.get('events_out')} rows, {c.get('dead_letters_out')} "
                     f"dead letters, {late}, {c.get('duplicates_collapsed')} duplicate sends collapsed")
        lines.append("written: " + ", ".join(f"{t} {n}" for t, n in w_tab.items())
                     + "; already present (skipped): " + ", ".join(f"{t} {n}" for t, n in skip.items()))
    for table, w in (r.aggregates or ({"windows": r.windows} if r.windows else {})).items():
        lines.append(f"aggregates {table}: " + _aggregate_text(w))
    if r.throughput:
        lines.append(f"time: {r.seconds.get('total')} s total, {r.seconds.get('replay')} s replaying "
                     f"({r.throughput.get('records_per_s')} records/s), {r.seconds.get('proof', 0)} s proof")
    if r.comparison:
        cmp = r.comparison
        lines.append("shadow vs main: " + ("identical over the range" if cmp.get("identical") else "DIFFERENT"))
        for t, d in cmp.items():
            if not isinstance(d, dict) or "only_in_shadow" not in d:
                continue
            lines.append(f"  {t}: {d.get('only_in_shadow')} only in shadow, {d.get('only_in_main', '-')} only in "
                         f"main, {d.get('differing')} differing")
    if r.proof:
        p = r.proof
        pc = p.get("counts", {})
        missing = pc.get("missing", pc.get("landed_missing", 0))
        duplicates = pc.get("duplicate_event_rows", pc.get("rows_duplicate_key", 0))
        lines.append(f"proof {p.get('run_id')}: {'PASS' if p.get('ok') else 'FAIL'} "
                     f"({p.get('expectations')} expectations, failed: {', '.join(p.get('failed', [])) or 'none'}; "
                     f"missing {missing}, duplicate rows {duplicates}; aggregates: {pc.get('aggregates_checked', 0)} "
                     f"checked by value, {pc.get('aggregates_mismatch', 0)} mismatched, "
                     f"{pc.get('aggregates_missing', 0)} missing)")
        if p.get("text") and not p.get("ok"):
            lines += ["  " + line for line in p["text"].splitlines()]
        lines.append(f"proof results: {p.get('local', {}).get('data_docs')}"
                     + (f"  ({p['s3']['data_docs']})" if p.get("s3") else ""))
    for note in r.notes:
        lines.append(f"note: {note}")
    lines.append(f"report: {r.artifacts.get('report')}"
                 + (f"  ({r.artifacts['report_s3']})" if r.artifacts.get("report_s3") else ""))
    return "\n".join(lines)
