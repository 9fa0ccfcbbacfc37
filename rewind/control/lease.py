"""The driver lease of a stream, decided: who may run it, and whether a running driver still may. Pure.

Why a lease with an epoch, not a lock: a lock lives in one kernel, and a driver on another host
(or one that was paused, by a long GC or a network partition, and resumed) does not see it. A
lease lives in the shared control store (``rewind.control.leases`` reads and writes it with the
store's conditional writes); it names its holder and is valid until ``renewed_at + ttl_s``; a
holder that stops renewing loses it at that time, without any kernel telling anyone. Each take
raises the *epoch* by one, and every write that matters carries it: a sink commit is refused in
its own transaction when a newer epoch exists, and a checkpoint write is refused once the holder's
lease has lapsed locally (``valid_until``). So a driver that wakes up after losing its lease
(a *zombie*) can change nothing the new driver reads.

Time: a taker judges expiry by its own clock with ``skew_s`` of allowance; a holder stops writing
``margin_s`` before the expiry it wrote, by its monotonic clock. The two together are the room
left for clock skew between hosts and for a pause between a check and a write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["Fenced", "Holder", "Keep", "Lease", "Take", "Wait", "decide_renew", "decide_take", "describe",
           "fenced_line", "margin_s", "valid_until"]

#: Seconds of clock skew between hosts a taker allows before it calls a lease expired.
SKEW_S = 1.0


@dataclass(frozen=True)
class Holder:
    """A process that holds (or wants) the lease.

    ``pidns`` and ``boot_id`` say on which kernel and in which PID namespace ``pid`` means
    something: another process can check that pid only when both match its own (the same-host
    shortcut); elsewhere only the lease's expiry counts."""

    host: str
    pid: int
    driver_id: str
    pidns: str = ""
    boot_id: str = ""
    role: str = "driver"

    def same_machine(self, other: Holder) -> bool:
        """Whether ``other.pid`` can be checked from this holder's machine and namespace."""
        return bool(self.pidns and self.boot_id) and (self.host, self.pidns, self.boot_id) == \
            (other.host, other.pidns, other.boot_id)


@dataclass(frozen=True)
class Lease:
    stream: str
    epoch: int
    holder: Holder
    acquired_at: float
    renewed_at: float
    ttl_s: float
    released: bool = False
    info: dict[str, Any] = field(default_factory=dict, compare=False)  # what the holder says it does

    @property
    def expires_at(self) -> float:
        return self.renewed_at + self.ttl_s

    def renewed(self, at: float) -> Lease:
        return replace(self, renewed_at=at)

    def to_doc(self) -> dict[str, Any]:
        return {**asdict(self), "expires_at": self.expires_at, "expires": _iso(self.expires_at)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Lease | None:
        """The lease in a stored document, or None when it is not one (missing or garbled fields)."""
        try:
            holder = Holder(**{k: v for k, v in doc["holder"].items() if k in Holder.__dataclass_fields__})
            return cls(str(doc["stream"]), int(doc["epoch"]), holder, float(doc["acquired_at"]),
                       float(doc["renewed_at"]), float(doc["ttl_s"]), bool(doc.get("released", False)),
                       dict(doc.get("info") or {}))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


@dataclass(frozen=True)
class Take:
    """Take the lease with this epoch (written with a conditional write: a lost race re-decides)."""

    epoch: int
    reason: str


@dataclass(frozen=True)
class Wait:
    """Another holder's lease is valid until ``until`` (this host's clock, skew allowed for)."""

    until: float
    reason: str


@dataclass(frozen=True)
class Keep:
    """The lease is still this holder's: renew it."""


@dataclass(frozen=True)
class Fenced:
    """The lease was taken over (``by``; None when it was deleted): stop, write nothing."""

    by: Lease | None


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds")


def describe(lease: Lease) -> str:
    """``pid 42 on host-a (epoch 7, a driver; lease expires at 2026-...Z)``."""
    h = lease.holder
    return (f"pid {h.pid} on {h.host} (epoch {lease.epoch}, a {h.role}; lease "
            f"{'released' if lease.released else 'expires at ' + _iso(lease.expires_at)})")


def decide_take(current: Lease | None, me: Holder, now: float, *, holder_gone: bool = False,
                skew_s: float = SKEW_S) -> Take | Wait:
    """May ``me`` take the lease now, and with which epoch? ``holder_gone``: the holder is on this
    machine (``Holder.same_machine``) and its process has exited: no need to wait for the expiry."""
    if current is None:
        return Take(1, "no driver has held this stream's lease yet")
    if current.holder.driver_id == me.driver_id and not current.released:
        return Take(current.epoch, "the lease is already this process's")
    who = describe(current)
    if current.released:
        return Take(current.epoch + 1, f"released by {who}")
    if holder_gone:
        return Take(current.epoch + 1, f"the holder's process is gone (same host): {who}")
    if now >= current.expires_at + skew_s:
        return Take(current.epoch + 1, f"expired {now - current.expires_at:.1f}s ago: {who}")
    return Wait(current.expires_at + skew_s, f"held by {who}")


def decide_renew(current: Lease | None, mine: Lease) -> Keep | Fenced:
    """Is the stored lease still ``mine`` (same epoch, same process, not released)?"""
    if current is None:
        return Fenced(None)
    if current.epoch == mine.epoch and current.holder.driver_id == mine.holder.driver_id and not current.released:
        return Keep()
    return Fenced(current)


def margin_s(ttl_s: float) -> float:
    """How long before the expiry it wrote a holder stops writing (a quarter of the TTL, at least 1 s)."""
    return max(1.0, ttl_s / 4)


def valid_until(renew_started: float, ttl_s: float) -> float:
    """Until when (same clock as ``renew_started``: the moment the renewal was sent) the holder may
    write: its own view of the expiry, less ``margin_s``."""
    return renew_started + ttl_s - margin_s(ttl_s)


def fenced_line(mine: Lease, by: Lease | None) -> str:
    """The one line a fenced driver logs before it exits."""
    if by is None:
        return f"fenced: the lease of epoch {mine.epoch} was deleted from the control store"
    return f"fenced: epoch {mine.epoch} was taken over by epoch {by.epoch} on {by.holder.host}"
