"""The driver lease, decided and kept: pure decisions with a fake clock, then acquire / renew / fence
over a directory store (no services, no threads: each renewal is called by hand)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rewind.control.directory import DirectoryStore
from rewind.control.lease import (
    Fenced,
    Holder,
    Keep,
    Lease,
    Take,
    Wait,
    decide_renew,
    decide_take,
    fenced_line,
    valid_until,
)
from rewind.control.leases import DriverBusy, LeaseKeeper, LeaseLost, acquire, read_lease

A = Holder("host-a", 100, "driver-a", "pid:[1]", "boot-1")
B = Holder("host-b", 200, "driver-b", "pid:[2]", "boot-2")
A_SAME_KERNEL = Holder("host-a", 300, "driver-c", "pid:[1]", "boot-1")


def lease(holder: Holder = A, epoch: int = 3, at: float = 1000.0, ttl: float = 20.0, **kw: object) -> Lease:
    return Lease("orders", epoch, holder, at, at, ttl, **kw)  # type: ignore[arg-type]


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


# -- pure decisions ---------------------------------------------------------------------------------

def test_the_first_taker_gets_epoch_1_and_each_take_adds_one() -> None:
    assert decide_take(None, A, 0.0) == Take(1, "no driver has held this stream's lease yet")
    d = decide_take(lease(released=True), B, 1001.0)
    assert isinstance(d, Take) and d.epoch == 4


def test_a_valid_lease_of_another_host_is_waited_for_until_it_expires_plus_skew() -> None:
    held = lease(at=1000.0, ttl=20.0)
    d = decide_take(held, B, 1010.0)
    assert isinstance(d, Wait) and d.until == 1021.0 and "host-a" in d.reason and "epoch 3" in d.reason
    assert isinstance(decide_take(held, B, 1020.5), Wait)  # expired by the holder's clock, not past the skew
    d = decide_take(held, B, 1021.0)
    assert isinstance(d, Take) and d.epoch == 4 and "expired" in d.reason


def test_a_dead_holder_on_the_same_machine_is_not_waited_for_and_a_pid_elsewhere_means_nothing() -> None:
    held = lease(at=1000.0)
    assert isinstance(decide_take(held, A_SAME_KERNEL, 1001.0, holder_gone=True), Take)
    assert A_SAME_KERNEL.same_machine(A) and not B.same_machine(A)
    assert not Holder("host-a", 1, "x", "pid:[9]", "boot-1").same_machine(A)  # another PID namespace
    assert not Holder("host-a", 1, "x").same_machine(Holder("host-a", 2, "y"))  # unknown namespaces


def test_a_renewal_keeps_its_own_lease_and_is_fenced_by_any_other() -> None:
    mine = lease()
    assert decide_renew(mine.renewed(1005.0), mine) == Keep()
    taken = lease(B, epoch=4)
    assert decide_renew(taken, mine) == Fenced(taken)
    assert decide_renew(None, mine) == Fenced(None)
    assert isinstance(decide_renew(replace(mine, released=True), mine), Fenced)
    assert fenced_line(mine, taken) == "fenced: epoch 3 was taken over by epoch 4 on host-b"


def test_a_holder_stops_writing_a_margin_before_the_expiry_it_wrote() -> None:
    assert valid_until(100.0, 20.0) == 115.0
    assert valid_until(100.0, 2.0) == 101.0  # at least a second


def test_a_lease_survives_its_document() -> None:
    held = lease(B, epoch=9)
    assert Lease.from_doc(held.to_doc()) == held
    assert held.to_doc()["expires"] == "1970-01-01T00:17:00+00:00"
    assert Lease.from_doc({"epoch": "x"}) is None


# -- acquire, renew, fence over a store ------------------------------------------------------------

def test_two_drivers_take_turns_and_the_zombie_is_fenced(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    clock, mono = Clock(), Clock(50.0)
    got = acquire(store, A, 20.0, 0, clock=clock, sleep=clock.sleep)
    assert got is not None
    first, version = got
    keeper_a = LeaseKeeper(store, first, version, clock=clock, monotonic=mono)
    clock.t += 5
    mono.t += 5
    assert keeper_a.renew()
    keeper_a.check("batch 1")

    with pytest.raises(DriverBusy) as busy:  # A renews: B is refused, naming A's host, epoch and expiry
        acquire(store, B, 20.0, wait_s=3, clock=clock, sleep=clock.sleep)
    msg = str(busy.value)
    assert "host-a" in msg and "epoch 1" in msg and "expires at 1970-01-01T00:17:05" in msg
    assert busy.value.exit_code == 3

    clock.t += 30  # A is paused (no renewals): its lease lapses; B takes it with epoch 2
    mono.t += 30
    got_b = acquire(store, B, 20.0, wait_s=0, clock=clock, sleep=clock.sleep)
    assert got_b is not None and got_b[0].epoch == 2
    with pytest.raises(LeaseLost, match="not renewed in time"):  # A wakes up: its own deadline has passed
        keeper_a.check("batch 2")
    lines: list[str] = []
    keeper_a.on_fenced.append(lines.append)
    assert keeper_a.renew() is False
    assert lines == ["fenced: epoch 1 was taken over by epoch 2 on host-b"]
    with pytest.raises(LeaseLost, match="fenced: epoch 1 was taken over by epoch 2 on host-b"):
        keeper_a.check("batch 2")
    assert read_lease(store)[0] == got_b[0]  # the zombie wrote nothing
    keeper_a.release()
    assert read_lease(store)[0] == got_b[0]


def test_a_released_lease_is_taken_at_once_and_a_dead_local_holder_too(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    clock = Clock()
    got = acquire(store, A, 20.0, 0, clock=clock)
    assert got is not None
    LeaseKeeper(store, *got, clock=clock).release()
    got_b = acquire(store, B, 20.0, 0, clock=clock)
    assert got_b is not None and got_b[0].epoch == 2
    got_c = acquire(store, Holder("host-b", 201, "driver-d", "pid:[2]", "boot-2"), 20.0, 0, clock=clock,
                    alive=lambda pid: pid != 200)
    assert got_c is not None and got_c[0].epoch == 3


def test_a_standby_waits_without_limit_and_stops_when_asked(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    acquire(store, A, 60.0, 0)
    stop = threading.Event()
    stop.set()
    assert acquire(store, B, 60.0, None, stop=stop) is None


def test_racing_takers_never_both_win(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    acquire(store, A, 0.1, 0)
    later = time.time() + 100  # A's lease has lapsed for every taker
    won: list[int] = []
    refused: list[str] = []
    barrier = threading.Barrier(8)

    def take(i: int) -> None:
        barrier.wait()
        try:
            got = acquire(store, Holder(f"h{i}", i, f"d{i}"), 60.0, 0, clock=lambda: later)
            won.append(got[0].epoch if got else -1)
        except DriverBusy as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won == [2] and len(refused) == 7
