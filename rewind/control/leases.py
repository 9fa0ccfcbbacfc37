"""Take, keep and give back a stream's driver lease in the control store (the decisions: ``lease``).

- ``acquire`` takes the lease with the next epoch as soon as ``decide_take`` allows, with a
  conditional write (two takers never both win); it waits at most ``wait_s`` for a holder's lease
  to lapse, then refuses naming the holder, its epoch and its expiry.
- ``LeaseKeeper`` renews it from a thread every quarter of the TTL and keeps ``valid_until``
  (monotonic) current; ``check`` refuses once that has passed or the lease was taken over. On a
  takeover it calls its ``on_fenced`` callbacks once (the driver stops its query and exits), and
  on every renewal its ``on_renewed`` ones (the checkpoint file manager's deadline in the JVM).
- ``release`` marks the lease released on a clean exit, so a successor takes it at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rewind.control.lease import Fenced, Holder, Lease, Take, decide_renew, decide_take, describe, fenced_line
from rewind.control.lease import valid_until as lease_valid_until
from rewind.control.store import ControlStore, ControlStoreError
from rewind.errors import Refused
from rewind.runtime.processes import pid_alive

log = logging.getLogger(__name__)

__all__ = ["LEASE", "DriverBusy", "LeaseKeeper", "LeaseLost", "acquire", "holder_gone", "me", "read_lease"]

LEASE = "lease"


class DriverBusy(Refused):
    """Another driver holds the stream's lease (exit code 3: a refusal, nothing was started)."""


class LeaseLost(Refused):
    """This driver's lease was taken over or lapsed: it writes nothing more (``fenced: ...``)."""


def _read(path: str) -> str:
    try:
        return os.readlink(path) if path.startswith("/proc/self/ns") else open(path).read().strip()
    except OSError:
        return ""


def me(role: str = "driver") -> Holder:
    """This process as a lease holder (a new ``driver_id`` each call)."""
    return Holder(socket.gethostname(), os.getpid(), uuid.uuid4().hex, _read("/proc/self/ns/pid"),
                  _read("/proc/sys/kernel/random/boot_id"), role)


def read_lease(store: ControlStore, name: str = LEASE) -> tuple[Lease | None, str | None]:
    got = store.read(name)
    return (Lease.from_doc(got.doc), got.version) if got else (None, None)


def holder_gone(lease: Lease, here: Holder, alive: Callable[[int], bool]) -> bool:
    """The same-host shortcut: the holder runs on this machine and namespace, and its pid is gone."""
    return here.same_machine(lease.holder) and not alive(lease.holder.pid)


def acquire(store: ControlStore, holder: Holder, ttl_s: float, wait_s: float | None, *,
            alive: Callable[[int], bool] | None = None, stop: threading.Event | None = None,
            clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
            poll_s: float = 0.25, quiet: bool = False, name: str = LEASE,
            info: dict[str, Any] | None = None) -> tuple[Lease, str] | None:
    """Take the lease (see the module docstring): the lease and its stored version; None only when
    ``stop`` was set while waiting. ``wait_s`` None waits as long as it takes (a standby). ``name``:
    another lease of the stream (one replay at a time), ``info`` what the holder says it does."""

    is_alive = alive or pid_alive
    started = clock()
    logged = False
    while True:
        current, version = read_lease(store, name)
        now = clock()
        gone = current is not None and holder_gone(current, holder, is_alive)
        decision = decide_take(current, holder, now, holder_gone=gone)
        if isinstance(decision, Take):
            lease = Lease(store.stream, decision.epoch, holder, now, now, ttl_s, info=dict(info or {}))
            written = store.put(name, lease.to_doc(), version)
            if written is not None:
                log.info("stream %s: lease taken with epoch %d (%s)", store.stream, lease.epoch, decision.reason)
                return lease, written
            sleep(0.02)  # another taker won the race: decide again on what it wrote
            continue
        waited = now - started
        if wait_s is not None and waited >= wait_s:
            raise DriverBusy(f"stream {store.stream!r} is already run by {decision.reason.removeprefix('held by ')}; "
                             f"waited {waited:.0f}s for its lease to lapse. One driver per stream: stop that one "
                             "first (`rewind stream stop STREAM`, from any host), or start this one with --standby "
                             f"to take over when its lease lapses (control store {store.where})")
        if not logged and not quiet:
            log.warning("stream %s: waiting%s for the lease %s", store.stream,
                        "" if wait_s is None else f" up to {wait_s:.0f}s", decision.reason)
            logged = True
        if stop is not None and stop.wait(min(poll_s, max(0.01, decision.until - now))):
            return None
        if stop is None:
            sleep(min(poll_s, max(0.01, decision.until - now)))


class LeaseKeeper:
    """Renews a held lease from a daemon thread (see the module docstring)."""

    def __init__(self, store: ControlStore, lease: Lease, version: str, *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 name: str = LEASE) -> None:
        self.store = store
        self.name = name
        self.lease = lease
        self._version = version
        self._clock, self._monotonic = clock, monotonic
        # renewed_at was read from the wall clock when the lease was written: that long ago, monotonically
        self._valid_until = lease_valid_until(monotonic() - max(0.0, clock() - lease.renewed_at), lease.ttl_s)
        self.fenced_by: Lease | None = None
        self.fenced = threading.Event()
        self.on_renewed: list[Callable[[Lease, float], None]] = []  # (lease, valid until: wall clock)
        self.on_fenced: list[Callable[[str], None]] = []
        self.on_tick: list[Callable[[], None]] = []  # after every renewal round of the thread (not when fenced)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    def valid_until_wall(self) -> float:
        """``valid_until`` as wall-clock time (for the JVM, which has no access to this monotonic clock)."""
        return self._clock() + (self._valid_until - self._monotonic())

    def start(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.store.stream}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = max(0.2, self.lease.ttl_s / 4)
        while not self._stop.wait(interval) and not self.fenced.is_set():
            try:
                self.renew()
                for tick in [] if self.fenced.is_set() else self.on_tick:
                    tick()
            except ControlStoreError as exc:
                log.warning("stream %s: lease renewal failed (%s); writes stop at the lease's local deadline "
                            "unless a renewal gets through", self.store.stream, exc)
            except Exception:  # noqa: BLE001 - the renewals must go on
                log.exception("stream %s: a lease tick failed", self.store.stream)

    def renew(self) -> bool:
        """One renewal; False when the lease turned out to be taken over (then fenced)."""
        with self._lock:
            if self.fenced.is_set():
                return False
            sent_mono, sent = self._monotonic(), self._clock()
            new = self.lease.renewed(sent)
            version = self.store.replace(self.name, new.to_doc(), self._version)
            if version is None:  # changed under us: a lost answer of ours, or a takeover
                got = self.store.read(self.name)
                current = Lease.from_doc(got.doc) if got else None
                if isinstance(decide_renew(current, self.lease), Fenced):
                    self._fence(current)
                    return False
                assert got is not None
                version = self.store.replace(self.name, new.to_doc(), got.version)
                if version is None:
                    return True  # raced again; the next round retries, the deadline still holds
            self.lease, self._version = new, version
            self._valid_until = lease_valid_until(sent_mono, new.ttl_s)
        for callback in self.on_renewed:
            callback(new, self.valid_until_wall())
        return True

    def advance(self, epoch: int, why: str) -> None:
        """Raise the held lease's epoch to ``epoch`` (a conditional write: only while it is still this driver's;
        else ``LeaseLost``). For a sink fenced at a higher epoch under another control store: a stream moved
        between stores through a savepoint (local -> YARN with ``s3a://``), or a store that was wiped, starts
        its epochs again at 1, and a stream's epochs must keep rising wherever its lease is kept."""
        with self._lock:
            if self.fenced.is_set():
                raise LeaseLost(f"{fenced_line(self.lease, self.fenced_by)}; not raising its epoch to {epoch}")
            if epoch <= self.lease.epoch:
                return
            sent_mono = self._monotonic()
            new = replace(self.lease.renewed(self._clock()), epoch=epoch)
            version = self.store.replace(self.name, new.to_doc(), self._version)
            if version is None:
                raise LeaseLost(f"stream {self.store.stream!r}: the lease of epoch {self.lease.epoch} changed before "
                                f"its epoch could be raised to {epoch} ({why}); not writing")
            old, self.lease, self._version = self.lease.epoch, new, version
            self._valid_until = lease_valid_until(sent_mono, new.ttl_s)
        log.warning("stream %s: lease epoch raised from %d to %d: %s", self.store.stream, old, epoch, why)
        for callback in self.on_renewed:
            callback(new, self.valid_until_wall())

    def _fence(self, by: Lease | None) -> None:
        self.fenced_by = by
        self.fenced.set()
        line = fenced_line(self.lease, by)  # the driver logs it (once) as it exits
        for callback in self.on_fenced:
            try:
                callback(line)
            except Exception:  # noqa: BLE001 - every callback must run
                log.exception("stream %s: a fencing callback failed", self.store.stream)

    def check(self, what: str) -> None:
        """Refuse (``LeaseLost``) when this driver may no longer write ``what``."""
        if self.fenced.is_set():
            raise LeaseLost(f"{fenced_line(self.lease, self.fenced_by)}; not writing {what}")
        late = self._monotonic() - self._valid_until
        if late > 0:
            raise LeaseLost(f"the lease of epoch {self.lease.epoch} was not renewed in time ({late:.1f}s past its "
                            f"local deadline; control store {self.store.where}); not writing {what}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def release(self) -> None:
        """Stop renewing and mark the lease released, if it is still ours (a successor takes it at once)."""
        self.stop()
        with self._lock:
            if self.fenced.is_set():
                return
            try:
                if self.store.replace(self.name, replace(self.lease, released=True).to_doc(),
                                      self._version) is None:
                    log.warning("stream %s: the lease changed before it was released: %s", self.store.stream,
                                describe(self.lease))
            except ControlStoreError as exc:
                log.warning("stream %s: the lease was not released (%s); it lapses at %s", self.store.stream, exc,
                            self.lease.expires_at)
