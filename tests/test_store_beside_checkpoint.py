"""The control store lives with the checkpoint it fences (pure file-system cases, no Spark).

What a user with a shared checkpoint directory relies on: two hosts with their own ``status_dir``
get one store (so one lease); a store an older Rewind left in ``status_dir`` moves once, never
leaving two live copies; a driver whose store is not the one the checkpoint's marker names is
refused before it takes a lease. The end-to-end case (two namespace hosts, real drivers) is in
``test_hosts_fencing``."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from rewind.control.directory import DirectoryStore
from rewind.control.driver_lease import take_driver_lease
from rewind.control.leases import read_lease
from rewind.control.location import control_store
from rewind.control.marker import MARKER, StoreMismatch, check_store_marker
from rewind.control.moving import MOVED_SUFFIX, move_from_status_dir
from rewind.errors import EXIT_REFUSED
from rewind.paths import paths_of, status_file
from rewind.registry import StreamSpec


def spec_of(tmp_path: Path, host: str, **kw: Any) -> StreamSpec:
    """A stream as one host's registry gives it: the shared checkpoint, this host's status_dir."""
    return StreamSpec(name="orders", topics=["t"], transform="m:T", sink={"url": "sqlite:///x.db"},
                      checkpoint=str(tmp_path / "shared" / "cp" / "orders"),
                      status_dir=str(tmp_path / host / "status"), **kw)


def test_two_hosts_with_their_own_status_dir_share_one_store_and_one_lease(tmp_path: Path) -> None:
    a, b = spec_of(tmp_path, "host-a"), spec_of(tmp_path, "host-b")
    assert control_store(a).where == control_store(b).where == str(tmp_path / "shared" / "cp" / "orders.control")
    assert status_file(a) == status_file(b) == paths_of(b).status
    keeper = take_driver_lease(a)
    try:
        lease = read_lease(control_store(b))[0]  # what host b's driver would see: host a's lease
        assert lease is not None and lease.epoch == keeper.epoch == 1 and not lease.released
    finally:
        keeper.release()


def test_a_store_left_in_status_dir_moves_once_and_the_old_files_are_kept_renamed(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "host-a")
    old = DirectoryStore(spec.status_dir, "orders")
    old.write("status", {"state": "stopped", "last_batch_id": 41})
    old.write("failures", {"failures": [{"kind": "process_gone"}]})
    old.write("proof-cursor", {"end": {"t": {"0": 7}}})
    (Path(spec.status_dir) / "orders.history.jsonl").write_text('{"t": 1}\n')
    (Path(spec.status_dir) / "other.json").write_text("{}")  # another stream's: not touched
    (Path(spec.status_dir) / "orders_eu.json").write_text("{}")  # a stream whose name starts alike
    store = control_store(spec)
    assert store.read("status").doc["last_batch_id"] == 41  # type: ignore[union-attr]
    assert store.read("failures").doc["failures"] == [{"kind": "process_gone"}]  # type: ignore[union-attr]
    assert store.read("proof-cursor").doc["end"] == {"t": {"0": 7}}  # type: ignore[union-attr]
    assert (store.directory / "orders.history.jsonl").read_text() == '{"t": 1}\n'
    left = sorted(p.name for p in Path(spec.status_dir).iterdir() if not p.name.startswith("."))
    assert left == ["orders.failures.json" + MOVED_SUFFIX, "orders.history.jsonl" + MOVED_SUFFIX,
                    "orders.json" + MOVED_SUFFIX, "orders.proof-cursor.json" + MOVED_SUFFIX, "orders_eu.json",
                    "other.json"]
    assert old.read("status") is None  # no second live copy
    store.write("status", {"state": "running"})
    assert move_from_status_dir(spec, store) == []  # once
    assert control_store(spec).read("status").doc == {"state": "running"}  # type: ignore[union-attr]


def _open_store(spec_json: str, out: Any) -> None:
    spec = StreamSpec.model_validate_json(spec_json)
    out.put(control_store(spec).read("status").doc["n"])  # type: ignore[union-attr]


def test_hosts_moving_one_store_at_once_move_it_once(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "host-a")
    DirectoryStore(spec.status_dir, "orders").write("status", {"n": 5})
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_store, args=(spec.model_dump_json(), out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == [5, 5, 5, 5] and all(p.exitcode == 0 for p in procs)
    assert [p.name for p in Path(spec.status_dir).iterdir() if not p.name.startswith(".")] == \
        ["orders.json" + MOVED_SUFFIX]


def test_a_driver_whose_store_is_not_the_checkpoints_is_refused_in_one_line(tmp_path: Path) -> None:
    a = spec_of(tmp_path, "host-a", control=str(tmp_path / "host-a" / "control"))
    b = spec_of(tmp_path, "host-b", control=str(tmp_path / "host-b" / "control"))
    keeper = take_driver_lease(a)  # the first lease writes the marker beside the checkpoint
    keeper.release()
    marker = json.loads((Path(a.checkpoint + ".control") / f"orders.{MARKER}.json").read_text())
    assert marker["where"] == a.control
    with pytest.raises(StoreMismatch) as err:
        take_driver_lease(b, wait_s=0)
    line = str(err.value)
    assert err.value.exit_code == EXIT_REFUSED and "\n" not in line
    assert f"fenced by the control store {a.control}" in line and f"this driver's {b.control}" in line
    assert "`control:`" in line and f"orders.{MARKER}.json" in line
    assert read_lease(control_store(b))[0] is None  # refused before any lease was taken there
    check_store_marker(a, control_store(a))  # the marker's own store passes, again and again


def test_one_path_on_two_hosts_is_two_stores(tmp_path: Path) -> None:
    """A ``control`` directory that is local on each host has one name and two contents: the store's
    id tells them apart (here: the second host's directory is another directory at first use)."""
    a = spec_of(tmp_path, "host-a", control=str(tmp_path / "ctl"))
    check_store_marker(a, control_store(a))
    (tmp_path / "ctl").rename(tmp_path / "ctl-of-host-a")  # host b's /ctl: same path, empty
    with pytest.raises(StoreMismatch, match="fenced by the control store"):
        check_store_marker(a, control_store(a))
