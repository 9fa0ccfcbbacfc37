"""When the new version has failed: the rollback decision, pure.

After the switch the upgrade watches the new version the way the Flink Kubernetes Operator watches
a new deployment (it rolls back when the deployment is not healthy within its readiness timeout):
the new version must commit a batch it planned itself (not only the re-run of a batch the old
version planned before the stop), or report that it is caught up, within the startup grace
(``supervision.startup_grace`` of the new entry, or the upgrade's ``--grace``), counted from its
first launch; a failure before that is relaunched as the new entry's restart strategy says, and
when the strategy gives up (a crash loop: failures that never get past the batch the upgrade
stopped at), or the grace runs out, the answer is a rollback. Only the failures of this upgrade
count: an older history of the stream must not make a new version look like a crash loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rewind.supervision.restart_policy import Failure, decide
from rewind.upgrade.rules import short_cause


@dataclass(frozen=True)
class Attempt:
    """One launch of the new version: it committed a batch (``ok``), or why it did not."""

    at: float
    ok: bool
    cause: str = ""
    detail: str = ""
    batch_id: int | None = None  # the last committed batch when it failed


@dataclass(frozen=True)
class Next:
    action: Literal["healthy", "relaunch", "rollback"]
    delay_s: float = 0.0
    reason: str = ""


def next_step(attempts: list[Attempt], restart: Any, first_launch_at: float, now: float, grace_s: float) -> Next:
    """What to do after the newest attempt (``restart``: the new entry's ``RestartSpec``)."""
    if attempts and attempts[-1].ok:
        return Next("healthy", reason=f"committed a batch after {len(attempts)} launch(es)")
    last = attempts[-1] if attempts else None
    if now - first_launch_at >= grace_s:
        why = f"; last: {last.cause}: {short_cause(last.detail)}" if last else ""
        return Next("rollback", reason=f"no batch committed within the startup grace of {grace_s:.0f}s{why}")
    failures = [Failure(a.at, a.cause, a.batch_id, {}, a.detail) for a in attempts if not a.ok]
    decision = decide(restart, failures, now)
    if not decision.restart:
        after = f"past batch {last.batch_id}" if last and last.batch_id is not None else "a batch"
        why = f"; last: {last.cause}: {short_cause(last.detail)}" if last else ""
        return Next("rollback", reason=f"crash loop: the new version failed {len(failures)} times in a row without "
                                       f"committing {after}{why}")
    remaining = grace_s - (now - first_launch_at)
    return Next("relaunch", delay_s=max(0.0, min(decision.delay_s, remaining)), reason=decision.reason)
