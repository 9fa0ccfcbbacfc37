"""Asset drift: committed batches a table's watcher has not announced to Airflow yet, and when that is an
alert. Pure: plain data in, a dataclass out (``rewind.assets.drift_read`` gathers the data).

Why: Asset events that drift from what the stream committed go unnoticed (apache/airflow#64205): a
downstream DAG simply does not run. A table's cursor (``assets.<table>``) says what was announced; the
sink's ledger (or the stream's status) says what was committed. The gap is shown always, and is an alert
when the oldest committed batch not yet announced is older than two ``assets.interval`` (the watcher
announces at most one range per interval, so one interval behind is normal, two is a watcher stuck: the
triggerer down, the REST API it reads its events back from unreachable, a claim that never settles).
No cursor document means no watcher is configured for the table (no DAG is scheduled on its Asset, or
its watcher never claimed a range): that is never drift, so a stream without downstream DAGs never pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from rewind.assets.ranges import Cursor, LedgerBatch

#: The oldest unannounced committed batch may be this many intervals old before it is an alert.
ALERT_INTERVALS = 2.0


@dataclass(frozen=True)
class TableDrift:
    """One table's watcher against the stream's last committed batch (times: epoch seconds)."""

    table: str
    watcher: bool  # a cursor document exists (False: no watcher; nothing else is set)
    through_batch: int = -1  # announced (and read back from Airflow) through this batch
    seq: int = 0  # events announced so far
    emitted_at: float | None = None  # when the last announced range was claimed
    pending: str | None = None  # the claim in flight: its event id and batches
    pending_at: float | None = None  # when it was claimed
    last_batch: int | None = None  # the stream's last committed batch (None: none yet)
    committed_at: float | None = None  # when it committed
    behind: int = 0  # batch ids committed after ``through_batch``
    age_s: float | None = None  # how old the oldest of them is (a lower bound when not ``exact``)
    exact: bool = True
    limit_s: float = 120.0  # ALERT_INTERVALS x the interval
    alert: bool = False

    def line(self) -> str:
        """One line for a person: ``<table>: no watcher`` / ``caught up`` / ``N batch(es) behind ...``."""
        if not self.watcher:
            return f"{self.table}: no watcher"
        done = f"announced through batch {self.through_batch} (seq {self.seq}, {_when(self.emitted_at)})"
        claim = f"; claim in flight {self.pending} ({_when(self.pending_at)})" if self.pending else ""
        if self.behind <= 0:
            return f"{self.table}: caught up, {done}{claim}"
        last = f"last committed {self.last_batch}"
        old = "?" if self.age_s is None else f"{'' if self.exact else '>= '}{self.age_s:.0f}s"
        verdict = f"DRIFT (over {self.limit_s:.0f}s)" if self.alert else f"within {self.limit_s:.0f}s"
        return (f"{self.table}: {self.behind} batch(es) behind, {verdict}: oldest unannounced committed {old} ago; "
                f"{done}, {last}{claim}")

    def view(self) -> dict[str, Any]:
        """Plain JSON for ``--json`` and the Rewind page, with the line."""
        return {**asdict(self), "line": self.line()}


def commit_time(value: Any) -> float | None:
    """A ledger's ``committed_at`` (a datetime, or its text) as epoch seconds; None when it says nothing."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        at = value
    else:
        try:
            at = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def last_committed(ledger: Sequence[LedgerBatch]) -> tuple[int | None, float | None]:
    """The ledger's last committed batch and its commit time."""
    if not ledger:
        return None, None
    last = max(ledger, key=lambda b: b.batch_id)
    return last.batch_id, commit_time(last.committed_at)


def oldest_unannounced_at(ledger: Sequence[LedgerBatch], through_batch: int) -> float | None:
    """When the first committed batch after ``through_batch`` committed (None: none, or no time)."""
    after = [b for b in ledger if b.batch_id > through_batch]
    return commit_time(min(after, key=lambda b: b.batch_id).committed_at) if after else None


def needs_ledger(cursor: Cursor | None, last_batch: int | None, committed_at: float | None, interval_s: float,
                 now: float) -> bool:
    """Whether only the ledger's commit time of the oldest unannounced batch can decide the alert.

    The stream's status gives the last batch and its time only. One batch behind: that is the oldest.
    More: it committed after the last claim (the watcher claimed all it saw) and no later than the last
    batch, so an alert is ruled out when the claim is recent and certain when the last batch is old."""
    if cursor is None or last_batch is None or last_batch - cursor.through_batch <= 1 or committed_at is None:
        return False
    limit = ALERT_INTERVALS * interval_s
    ruled_out = cursor.emitted_at > 0 and now - cursor.emitted_at <= limit
    return not ruled_out and now - committed_at <= limit


def table_drift(table: str, cursor: Cursor | None, last_batch: int | None, committed_at: float | None,
                interval_s: float, now: float, oldest_at: float | None = None) -> TableDrift:
    """The drift of one table. ``cursor`` None: no cursor document (no watcher). ``oldest_at``: the ledger's
    commit time of the first batch after the cursor, when it was read; without it the age is the last
    batch's (exact when one batch behind, else a lower bound: ``needs_ledger`` says when that cannot decide)."""
    limit = ALERT_INTERVALS * interval_s
    if cursor is None:
        return TableDrift(table, False, limit_s=limit)
    pending = cursor.pending or {}
    event = pending.get("event") or {}
    claim = None
    if pending:
        span = event.get("batches") or []
        claim = f"{event.get('event_id')} " + (f"(batches {span[0]}-{span[1]})" if len(span) == 2
                                               else f"(replay {event.get('replay_id')})")
    behind = 0 if last_batch is None else max(0, last_batch - cursor.through_batch)
    exact = behind <= 1 or oldest_at is not None
    start = oldest_at if oldest_at is not None else committed_at
    age = None if behind == 0 or start is None else max(0.0, now - start)
    return TableDrift(table, True, cursor.through_batch, cursor.seq, cursor.emitted_at or None, claim,
                      float(pending["claimed_at"]) if "claimed_at" in pending else None, last_batch, committed_at,
                      behind, age, exact, limit, age is not None and age > limit)


def drift_alert(stream: str, drifts: Iterable[TableDrift]) -> str | None:
    """The alert's text when a table of ``stream`` drifted past its limit, else None (no watcher: never).
    Its first line is the cause an alert's subject shows."""
    late = [d for d in drifts if d.watcher and d.alert]
    if not late:
        return None
    worst = max(late, key=lambda d: d.age_s or 0.0)
    old = "?" if worst.age_s is None else f"{'' if worst.exact else '>= '}{worst.age_s:.0f}s"
    return (f"Asset events of {', '.join(d.table for d in late)} behind: the oldest committed batch not announced "
            f"is {old} old (limit {worst.limit_s:.0f}s, two assets.interval)\n"
            + "\n".join(d.line() for d in late)
            + f"\nThe Asset watcher of {stream} (CommittedRangeTrigger, in the triggerer) is not announcing: is the "
              "triggerer up, and can it read its events back from Airflow's REST API (connection "
              "rewind_airflow_api)? docs/assets.md#drift")


def _when(at: float | None) -> str:
    if not at:
        return "never"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
