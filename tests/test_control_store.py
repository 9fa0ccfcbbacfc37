"""The control store's contract, kept by the directory store and by the S3 store on SeaweedFS (its
conditional writes: If-None-Match and If-Match), including racing writers of one document."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewind.control.directory import DirectoryStore
from rewind.control.location import control_location, control_store
from rewind.control.s3 import S3ControlStore
from rewind.control.store import ControlStore, update
from rewind.registry import StreamSpec


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from rewind.embedded.services import SeaweedS3

    s3 = SeaweedS3(tmp_path_factory.mktemp("s3"))
    s3.start()
    s3.ensure_bucket("control")
    try:
        yield s3
    finally:
        s3.stop()


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ControlStore:
    if request.param == "directory":
        return DirectoryStore(tmp_path, "orders")
    s3 = request.getfixturevalue("seaweed")
    return S3ControlStore(s3.settings.client(), "control", f"t/{tmp_path.name}", "orders")  # type: ignore[attr-defined]


def test_create_replace_and_write_are_conditional_as_promised(store: ControlStore) -> None:
    assert store.read("lease") is None
    v1 = store.create("lease", {"epoch": 1})
    assert v1 is not None and store.create("lease", {"epoch": 99}) is None
    got = store.read("lease")
    assert got is not None and got.doc == {"epoch": 1} and got.version == v1
    v2 = store.replace("lease", {"epoch": 2}, v1)
    assert v2 is not None and v2 != v1
    assert store.replace("lease", {"epoch": 3}, v1) is None  # a stale version writes nothing
    assert store.read("lease").doc == {"epoch": 2}  # type: ignore[union-attr]
    assert store.replace("missing", {"x": 1}, v2) is None
    store.write("status", {"state": "running"})
    assert store.read("status").doc == {"state": "running"}  # type: ignore[union-attr]
    store.delete("status")
    store.delete("status")
    assert store.read("status") is None


def test_racing_updates_lose_nothing(store: ControlStore) -> None:
    barrier = threading.Barrier(6)

    def add(i: int) -> None:
        barrier.wait()
        for j in range(5):
            update(store, "failures", lambda doc: {"items": [*doc.get("items", []), f"{i}-{j}"]})

    threads = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.read("failures")
    assert got is not None and sorted(got.doc["items"]) == sorted(f"{i}-{j}" for i in range(6) for j in range(5))


def test_racing_creators_one_wins(store: ControlStore) -> None:
    barrier = threading.Barrier(8)
    won: list[int] = []

    def create(i: int) -> None:
        barrier.wait()
        if store.create("lease", {"holder": i}) is not None:
            won.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and store.read("lease").doc == {"holder": won[0]}  # type: ignore[union-attr]


def test_the_directory_store_keeps_the_file_names_of_old(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    store.write("status", {"state": "running"})
    store.write("failures", {"failures": []})
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == \
        ["orders.failures.json", "orders.json"]


def _spec(**kw: str) -> StreamSpec:
    return StreamSpec(name="orders", topics=["t"], transform="m:T", sink={"url": "sqlite:///x.db"},
                      checkpoint=kw.pop("checkpoint", "/data/cp/orders"), status_dir="/data/status", **kw)


def test_where_a_streams_store_lives() -> None:
    assert control_location(_spec()) == "/data/cp/orders.control"  # beside the checkpoint, not status_dir
    assert control_location(_spec(checkpoint="/data/cp/orders/")) == "/data/cp/orders.control"
    assert control_location(_spec(checkpoint="s3a://bkt/cp/orders")) == "s3://bkt/cp/orders.control"
    assert control_location(_spec(control="s3://bkt/control/")) == "s3://bkt/control"
    assert isinstance(control_store(_spec()), DirectoryStore)
    assert control_store(_spec(control="/shared/control")).where == "/shared/control"


def test_an_s3_store_of_many_streams_gives_each_its_prefix(seaweed: object, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in seaweed.settings.env().items():  # type: ignore[attr-defined]
        monkeypatch.setenv(k, v)
    store = control_store(_spec(control="s3://control/shared"))
    assert isinstance(store, S3ControlStore) and store.where == "s3://control/shared/orders"
    assert store.create("lease", {"epoch": 1}) is not None


def test_a_garbled_document_reads_empty_and_can_be_replaced(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, "orders")
    store.path("lease").write_text("{ torn")
    got = store.read("lease")
    assert got is not None and got.doc == {}
    assert store.create("lease", {"epoch": 1}) is None  # it exists
    assert store.replace("lease", {"epoch": 1}, got.version) is not None
