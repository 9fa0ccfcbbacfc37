"""One driver per stream, across hosts: the driver lease, the standby's notice, and stop requests.

- Before its lease, a driver checks the marker beside the checkpoint (``rewind.control.marker``):
  a checkpoint fenced by another store than the driver's is refused (``StoreMismatch``, exit 3).
- A driver takes the stream's lease (``rewind.control.leases``) before its Spark session starts,
  with the next epoch, waiting up to ``REWIND_DRIVER_WAIT_S`` (60 s) for another holder's lease to
  lapse; then it is refused (``DriverBusy``, exit 3) naming the holder's host, epoch and expiry.
  Two drivers on one checkpoint would interleave batches in its offset log; the lease refuses that
  on any host, and its epoch fences the loser's writes (sinks, checkpoint) if it wakes up later.
- Is a driver alive? Its lease is held and not expired, and, where its pid can be checked (the same
  kernel and PID namespace: ``Holder.same_machine``), its process runs. A pid is never needed.
- A standby (``rewind stream run --standby``) says so in the ``standby`` document (``warming``,
  then ``ready``, renewed every few seconds, so a dead standby's notice goes stale), and waits for
  the lease: it takes it when the driver released it, when its lease lapsed, or at once when the
  driver was on its own host and its process is gone.
- ``request_stop`` asks the holder, wherever it runs, to stop after its batch in flight (the
  ``stop`` document, read at every lease renewal): SIGTERM reaches only processes of one host.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from rewind.control.lease import SKEW_S, Holder, Lease, describe
from rewind.control.leases import DriverBusy, LeaseKeeper, acquire, me, read_lease
from rewind.control.location import control_store
from rewind.control.marker import check_store_marker
from rewind.control.store import ControlStore
from rewind.runtime.processes import pid_alive
from rewind.settings import driver_lock_wait_s, lease_ttl_s

log = logging.getLogger(__name__)

__all__ = ["DriverBusy", "checkpoint_in_use", "clear_standby", "driver_alive", "local_pid", "mark_standby",
           "read_standby",
           "request_stop", "stop_requested", "take_driver_lease", "wait_for_takeover"]

STANDBY = "standby"
STOP = "stop"
#: A standby renews its notice this often; three missed renewals and it counts as gone.
STANDBY_BEAT_S = 5.0


def _ttl() -> float:

    return lease_ttl_s()


def take_driver_lease(spec: Any, wait_s: float | None = None, holder: Holder | None = None) -> LeaseKeeper:
    """The stream's lease with the next epoch, renewed from a thread; ``DriverBusy`` after ``wait_s``
    (default ``REWIND_DRIVER_WAIT_S``) while another driver holds it."""

    store = control_store(spec)
    check_store_marker(spec, store)
    got = acquire(store, holder or me(), _ttl(), driver_lock_wait_s() if wait_s is None else wait_s)
    assert got is not None  # no stop event: acquire returns or raises
    return LeaseKeeper(store, *got).start()


def wait_for_takeover(spec: Any, stop: threading.Event, notice: dict[str, Any]) -> LeaseKeeper | None:
    """A standby's wait: take the lease as soon as the driver's lapses (None: ``stop`` was set first).
    ``notice`` is the standby document, renewed while waiting."""
    store = control_store(spec)
    check_store_marker(spec, store)
    holder = me("standby")
    since = float(notice.get("since") or time.time())
    while not stop.is_set():
        if stop_requested(store, None, since):
            log.info("standby %s: stop requested", spec.name)
            return None
        mark_standby(spec, notice.get("state", "ready"), notice.get("warm_up_s"), store=store)
        try:
            got = acquire(store, holder, _ttl(), STANDBY_BEAT_S, stop=stop, quiet=True)
        except DriverBusy:
            continue
        if got is not None:
            return LeaseKeeper(store, *got).start()
    return None


def driver_alive(spec: Any, lease: Lease | None = None, now: float | None = None,
                 here: Holder | None = None) -> tuple[bool, str]:
    """Whether a driver holds the stream now, and why (see the module docstring)."""

    if lease is None:
        lease = read_lease(control_store(spec))[0]
    if lease is None:
        return False, "no driver has taken the lease"
    now = time.time() if now is None else now
    if lease.released:
        return False, f"the lease was released ({describe(lease)})"
    if now >= lease.expires_at + SKEW_S:
        return False, f"the lease lapsed {now - lease.expires_at:.0f}s ago ({describe(lease)})"
    here = here or me()
    if here.same_machine(lease.holder) and not pid_alive(lease.holder.pid):
        return False, f"its process is gone ({describe(lease)})"
    return True, f"held by {describe(lease)}"


def keep_standby_notice(spec: Any, stop: threading.Event, state: str = "warming") -> threading.Thread:
    """Renew the standby's notice from a thread until ``stop`` (its warm-up takes longer than the
    notice stays fresh; ``wait_for_takeover`` renews it from then on)."""
    def beat() -> None:
        while not stop.wait(STANDBY_BEAT_S):
            try:
                mark_standby(spec, state)
            except Exception as exc:  # noqa: BLE001 - a notice not renewed only goes stale
                log.warning("standby %s: notice not renewed: %s", spec.name, exc)

    mark_standby(spec, state)
    thread = threading.Thread(target=beat, name=f"standby-notice-{spec.name}", daemon=True)
    thread.start()
    return thread


def local_pid(status: dict[str, Any] | None) -> int | None:
    """The driver's pid when it can be checked from here (the status's holder is on this machine and
    PID namespace: the same-host shortcut), else None."""
    holder = (status or {}).get("holder") or {}
    try:
        there = Holder(**{k: v for k, v in holder.items() if k in Holder.__dataclass_fields__})
    except TypeError:
        return None
    return there.pid if there.pid and me().same_machine(there) else None


def mark_standby(spec: Any, state: str, warm_up_s: float | None = None, *, store: ControlStore | None = None) -> None:
    """The ``standby`` document: this process is a standby, ``warming`` (from its first moment, so
    that a stop finds it) or ``ready`` (waiting for the lease)."""
    store = store or control_store(spec)
    lease = read_lease(store)[0]
    holder = me("standby")
    store.write(STANDBY, {"stream": spec.name, "state": state, "pid": os.getpid(), "host": holder.host,
                          "pidns": holder.pidns, "boot_id": holder.boot_id, "at": time.time(),
                          "warm_up_s": None if warm_up_s is None else round(warm_up_s, 3),
                          "waiting_for": lease.to_doc() if lease else {}})


def read_standby(spec: Any, now: float | None = None) -> dict[str, Any]:
    """The standby's notice ({} when none, stale, or its process on this host is gone)."""

    got = control_store(spec).read(STANDBY)
    if got is None:
        return {}
    doc = got.doc
    now = time.time() if now is None else now
    if now - float(doc.get("at") or 0) > 3 * STANDBY_BEAT_S:
        return {}
    here = me()
    there = Holder(str(doc.get("host")), int(doc.get("pid") or 0), "", str(doc.get("pidns") or ""),
                   str(doc.get("boot_id") or ""))
    if here.same_machine(there) and not pid_alive(there.pid):
        return {}
    return doc


def clear_standby(spec: Any) -> None:
    """Remove the standby notice if it is this process's."""
    store = control_store(spec)
    got = store.read(STANDBY)
    if got is not None and got.doc.get("pid") == os.getpid() and got.doc.get("host") == me().host:
        store.delete(STANDBY)


def request_stop(spec: Any, reason: str, force: bool = False, standby: bool = False) -> Lease | None:
    """Ask the lease's holder, on whatever host, to stop after its batch in flight (``force``: now,
    fencing its own checkpoint writes and giving up its lease even if its query does not stop), or
    (``standby``) the waiting standby. Returns the lease asked (None: no driver, or a standby asked)."""
    store = control_store(spec)
    doc = {"reason": reason, "force": force, "at": time.time(), "by": me().host}
    if standby:
        store.write(STOP, {**doc, "standby": True, "epoch": None})
        return None
    lease = read_lease(store)[0]
    if lease is None or not driver_alive(spec, lease)[0]:
        return None
    store.write(STOP, {**doc, "epoch": lease.epoch})
    return lease


def stop_requested(store: ControlStore, epoch: int | None, since: float = 0.0) -> dict[str, Any] | None:
    """A stop request addressed to the holder of ``epoch`` (None: to the standby, made after ``since``)."""
    got = store.read(STOP)
    if got is None:
        return None
    if epoch is None:
        return got.doc if got.doc.get("standby") and float(got.doc.get("at") or 0) >= since else None
    return got.doc if got.doc.get("epoch") == epoch else None


def checkpoint_in_use(spec: Any) -> str | None:
    """Why the stream's checkpoint must not be changed now (a driver holds the lease, or a standby
    would take over mid-change), or None. Repair and restore refuse on it."""
    alive, why = driver_alive(spec)
    if alive:
        return f"a driver of stream {spec.name!r} is running: {why}"
    standby = read_standby(spec)
    if standby:
        return (f"a standby of stream {spec.name!r} (pid {standby['pid']} on {standby.get('host')}, "
                f"{standby.get('state')}) would start on the checkpoint mid-change")
    return None
