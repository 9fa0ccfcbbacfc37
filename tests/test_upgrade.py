"""Upgrades of a running stream, end to end: one demo stream shared by the scenarios, in order, while a
producer writes events (with malformed, late and duplicate records) the whole time.

1. a version whose deduplication key changed is refused by the pre-flight (Spark's own state schema
   check) while the live stream keeps running, untouched;
2. a column added, in last-state mode; 3. another column added, in savepoint mode;
4. a version that crashes on its first live batch (a record its pre-flight batch did not hold) is
   rolled back by itself to the pre-upgrade savepoint and entry; one that throws on a record newer than
   the savepoint is refused by the pre-flight; one whose totals are off by one is rolled back by the
   watch's proof;
5. blue/green: the off-by-one version beside the live one is aborted, the live driver untouched; a
   version with a column added takes over with the lease's next epoch;
6. the whole episode is proven from the data: every Kafka record in the sink once, every window.

Then the stateless mode on the stateless inventory stream (the demo keeps state, which stateless
drops: refused there, scenario 1 checks it), proven by its contract. The pre-flights run in this
process's Spark session; the stream drivers are real detached processes, launched as the command
line launches them.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from harness.processes import wait_for

from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.savepoints import list_savepoints
from rewind.control.status import read_status
from rewind.paths import status_file
from rewind.registry import load_registry
from rewind.runtime.processes import pid_alive, terminate_group
from rewind.storage import S3Config, S3Storage
from rewind.supervision.process_control import launch_stream, stop_stream, stream_liveness, wait_running
from rewind.upgrade.history import read_history
from rewind.upgrade.run import UpgradeRequest, upgrade
from tests.harness.registry_templates import demo_stream, inventory_stream, write_registry

pytestmark = pytest.mark.slow
VARIANTS = "tests.harness.upgrade_variants"
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Live:
    """A registered stream, launched as the command line launches it, and what the scenarios share."""

    name: str
    registry: Path
    home: Path
    bootstrap: str
    env: dict[str, str]
    store: Any
    pids: list[int] = field(default_factory=list)
    stop_producing: threading.Event = field(default_factory=threading.Event)
    producer: threading.Thread | None = None

    @property
    def spec(self) -> Any:
        return load_registry(self.registry).get(self.name)

    def status(self) -> Any:
        return read_status(status_file(self.spec))

    def _launch(self, spec: Any, registry: Path, log: Path) -> int:
        pid = launch_stream(spec, registry, self.bootstrap, log, env=self.env)
        self.pids.append(pid)
        return wait_running(spec, pid, timeout=300.0, log_path=log).pid

    def start(self, spec: Any) -> int:
        return self._launch(spec, self.registry, self.home / "logs" / f"stream-{len(self.pids) + 1}.log")

    def launch_green(self, spec: Any, registry: Path) -> int:
        """Blue/green's launch of the new version beside the live one (its log beside its registry file)."""
        return self._launch(spec, registry, registry.with_suffix(".log"))

    def blue_green(self, transform: str, spark: Any) -> dict[str, Any]:
        req = UpgradeRequest(self.name, str(self.registry), self.entry(transform), "new.yaml", "blue-green",
                             grace_s=240.0)
        return upgrade(req, self.store, self.bootstrap, self.start, spark=spark, launch_green=self.launch_green)

    def entry(self, transform: str) -> str:
        """The stream's entry with another transform, as the file a team hands ``--registry-entry``."""
        text = self.registry.read_text()
        old = load_registry(self.registry).get(self.name).transform
        return text.replace(f"transform: {old}", f"transform: {transform}")

    def request(self, transform: str, mode: str, **kw: Any) -> UpgradeRequest:
        return UpgradeRequest(self.name, str(self.registry), self.entry(transform), "new.yaml", mode, **kw)

    def committed_past(self, batch: int | None) -> Callable[[], bool]:
        return lambda: (st := self.status()) is not None and st.state == "running" and st.last_batch_id is not None \
            and (batch is None or st.last_batch_id > batch)

    def close(self) -> None:
        self.stop_producing.set()
        if self.producer is not None:
            self.producer.join(timeout=60)
        try:
            stop_stream(self.spec, timeout=60)
        finally:
            for pid in self.pids:
                if pid_alive(pid):
                    terminate_group(pid, grace=5.0)


def rows(spec: Any, table: str) -> Any:
    from rewind.driver.runner import open_sink

    sink = open_sink(spec)
    try:
        return sink.read_table(table)
    finally:
        sink.dispose()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, platform: Any) -> Iterator[Live]:
    from rewind.demo.producer import ProduceSpec, produce

    home = tmp_path_factory.mktemp("upgrade")
    topic = f"upg-{uuid.uuid4().hex[:8]}"
    registry = write_registry(home / "streams.yaml", demo_stream(
        "up", topic, home, max_offsets=5000, trigger="2 seconds", window="5 seconds", watermark_delay="10 seconds",
        allowed_lateness="5 seconds", restart="{strategy: fixed-delay, max_attempts: 1, delay: 1 second}",
        supervision="{startup_grace: 4 min}", savepoints="{schedule: null}"))
    live = Live("up", registry, home, platform.kafka_bootstrap, platform.env(),
                S3Storage(S3Config.from_platform(platform)))
    spec = ProduceSpec(topic=topic, count=1_000_000, rate=25, partitions=3, id_prefix="up", malformed_every=97,
                       late_every=211, duplicate_every=53)
    live.producer = threading.Thread(target=produce, args=(platform.kafka_bootstrap, spec),
                                     kwargs={"should_stop": live.stop_producing.is_set}, daemon=True)
    live.producer.start()
    try:
        live.start(live.spec)
        wait_for(live.committed_past(None), 240, "the first committed batch")
        yield live
    finally:
        live.close()


def test_an_incompatible_version_is_refused_while_the_live_stream_runs(demo: Live, spark: Any) -> None:
    from rewind.upgrade.rules import Incompatible, UpgradeRefused
    from rewind.upgrade.run import prepare

    before, text = demo.status(), demo.registry.read_text()
    with pytest.raises(Incompatible) as refused:
        upgrade(demo.request(f"{VARIANTS}:DemoDedupByEventAndKey", "savepoint"), demo.store, demo.bootstrap,
                demo.start, spark=spark)
    assert "the state key schema changed (Spark: STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in str(refused.value)
    assert "the live stream was not touched" in str(refused.value)
    with pytest.raises(UpgradeRefused, match="mode stateless drops the state of 3 stateful operator"):
        prepare(demo.request(f"{VARIANTS}:DemoWithCents", "stateless"))
    wait_for(demo.committed_past(before.last_batch_id), 120, "a batch after the refusal")
    assert demo.status().pid == before.pid and pid_alive(before.pid) and demo.registry.read_text() == text
    assert [r["result"] for r in read_history(demo.spec)] == ["refused"]


def test_a_column_added_in_last_state_mode(demo: Live, spark: Any) -> None:
    before, checkpoint = demo.status(), active_checkpoint(demo.spec)
    record = upgrade(demo.request(f"{VARIANTS}:DemoWithCents", "last-state"), demo.store, demo.bootstrap,
                     demo.start, spark=spark)
    assert record["result"] == "upgraded", record
    assert demo.spec.transform == f"{VARIANTS}:DemoWithCents" and active_checkpoint(demo.spec) == checkpoint
    assert demo.status().pid != before.pid
    wait_for(lambda: rows(demo.spec, "events")["amount_cents"].notna().any(), 120, "rows with amount_cents")


def test_a_column_added_in_savepoint_mode(demo: Live, spark: Any) -> None:
    checkpoint = active_checkpoint(demo.spec)
    record = upgrade(demo.request(f"{VARIANTS}:DemoWithCentsAndSign", "savepoint"), demo.store, demo.bootstrap,
                     demo.start, spark=spark)
    assert record["result"] == "upgraded", record
    assert active_checkpoint(demo.spec) != checkpoint and record["savepoint"]["id"] in active_checkpoint(demo.spec)
    wait_for(lambda: rows(demo.spec, "events")["amount_sign"].notna().any(), 120, "rows with amount_sign")


def test_a_version_that_crashes_on_its_first_batch_is_rolled_back(demo: Live, spark: Any) -> None:
    """The new version passes its pre-flight batch, then meets a record keyed ``poison`` (sent while the
    stream is stopped for the switch) in its first live batch, twice (the restart strategy allows one
    relaunch): a crash loop. Rewind goes back to the stop's savepoint and the previous entry."""
    from confluent_kafka import Producer

    from rewind.demo.events import Event
    from rewind.supervision.failures import read_failures
    from tests.harness.upgrade_variants import POISON_KEY

    def poison(step: str, _detail: str) -> None:
        if step == "stopped":
            producer = Producer({"bootstrap.servers": demo.bootstrap})
            event = Event("poison-1", POISON_KEY, 1.0, datetime.now(UTC))
            producer.produce(demo.spec.topics[0], event.encode(), POISON_KEY.encode())
            producer.flush(10)

    running = demo.spec.transform
    record = upgrade(demo.request(f"{VARIANTS}:DemoFailsOnPoison", "last-state"), demo.store, demo.bootstrap,
                     demo.start, spark=spark, on_step=poison)
    assert record["result"] == "rolled_back", record
    assert record["reason"].startswith("crash loop: the new version failed 2 times in a row without committing "
                                       "past batch") and record["reason"].endswith("cannot price key 'poison'")
    assert [s["step"] for s in record["steps"]][-5:] == ["switched", "failed", "failed", "rolling_back",
                                                         "rolled_back"]
    assert demo.spec.transform == running and record["savepoint"]["id"] in active_checkpoint(demo.spec)
    assert read_failures(demo.spec)["gave_up"] is None  # the new version's crash verdict does not block the old
    wait_for(lambda: (rows(demo.spec, "events")["event_id"] == "poison-1").any(), 120,
             "the old version writing the poison record")


def test_a_version_that_throws_on_a_record_newer_than_the_savepoint_is_refused_by_the_preflight(
        demo: Live, tmp_path: Path) -> None:
    """A record keyed ``poison`` arrives after the newest savepoint and the live stream commits it; ``rewind
    stream upgrade`` to the version that throws on it is refused by the pre-flight's run on the newest
    records (a Spark job of its own, its log in a file): exit 3, one line naming the range, the cause and
    the log, and the live driver never stopped."""
    import subprocess
    import sys

    from confluent_kafka import Producer

    from rewind.demo.events import Event
    from tests.harness.upgrade_variants import POISON_KEY

    newest = list_savepoints(demo.store, demo.name).complete[0]
    producer = Producer({"bootstrap.servers": demo.bootstrap})
    delivered: list[Any] = []
    producer.produce(demo.spec.topics[0], Event("poison-2", POISON_KEY, 2.0, datetime.now(UTC)).encode(),
                     POISON_KEY.encode(), on_delivery=lambda err, msg: delivered.append(msg))
    producer.flush(10)
    part, offset = delivered[0].partition(), delivered[0].offset()
    assert offset >= newest.offsets[demo.spec.topics[0]][str(part)]  # newer than the newest savepoint
    wait_for(lambda: int((demo.status().end_offsets.get(demo.spec.topics[0]) or {}).get(str(part), 0)) > offset, 120,
             "the live stream committing the poison record")
    before, text = demo.status(), demo.registry.read_text()
    entry = tmp_path / "new.yaml"
    entry.write_text(demo.entry(f"{VARIANTS}:DemoFailsOnPoison"))
    done = subprocess.run([sys.executable, "-m", "rewind.cli", "stream", "upgrade", demo.name, "--registry-entry",
                           str(entry), "--mode", "last-state", "--registry", str(demo.registry), "--bootstrap",
                           demo.bootstrap], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **demo.env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 3, done.stderr[-3000:]
    refusals = [ln for ln in done.stderr.splitlines() if ln.startswith("refused: ")]
    assert len(refusals) == 1 and "Traceback" not in done.stderr and "ERROR" not in done.stderr, done.stderr[-3000:]
    line = refusals[0]
    assert "failed on the newest records" in line and f"{demo.spec.topics[0]}[{part}]" in line, line
    assert "cannot price key 'poison'" in line and "the live stream was not touched" in line, line
    log = Path(line.rsplit("Spark's log: ", 1)[1].split(")")[0])
    assert log.is_file() and "cannot price key 'poison'" in log.read_text(), log
    assert demo.status().pid == before.pid and pid_alive(before.pid) and demo.registry.read_text() == text
    assert demo.status().epoch == before.epoch  # never stopped, never relaunched
    wait_for(demo.committed_past(before.last_batch_id), 120, "a batch after the refusal")


def test_a_version_that_writes_a_count_off_by_one_is_rolled_back_by_the_watchs_proof(demo: Live, spark: Any
                                                                                      ) -> None:
    """It passes the pre-flight and runs healthy; the proof of its first batches finds the window counts
    it wrote one too many, and the upgrade rolls back to the stop's savepoint and the previous entry, the
    offending rows in the record. The last test proves the whole episode's data exact afterwards."""
    running = demo.spec.transform
    record = upgrade(demo.request(f"{VARIANTS}:DemoCountsOneMore", "last-state"), demo.store, demo.bootstrap,
                     demo.start, spark=spark)
    assert record["result"] == "rolled_back", record
    assert record["reason"].startswith("the new version's output failed its proof: "), record["reason"]
    steps = [s["step"] for s in record["steps"]]
    assert steps[-5:] == ["launched", "proving", "proof_failed", "rolling_back", "rolled_back"], steps
    proof = record["proof"]
    assert proof["ok"] is False and proof["counts"]["aggregates_mismatch"] >= 1, proof["counts"]
    shown = [f for f in proof["failures"] if f["examples"]]
    assert shown and any("event_count" in str(f["examples"]) for f in shown), proof["failures"]
    assert demo.spec.transform == running and record["savepoint"]["id"] in active_checkpoint(demo.spec)


def test_an_aborted_blue_green_leaves_the_live_stream_untouched(demo: Live, spark: Any) -> None:
    """Blue/green: a new version whose totals are one too many runs beside the live one, into tables of its
    own, fails its proof there and is stopped. The live driver (same pid) committed meanwhile; its entry,
    checkpoint and tables' columns are as they were; green's tables and checkpoint stay for a look."""
    from rewind.upgrade.bluegreen import BlueGreenAborted

    before, text, checkpoint = demo.status(), demo.registry.read_text(), active_checkpoint(demo.spec)
    columns = list(rows(demo.spec, "events").columns)
    with pytest.raises(BlueGreenAborted, match="failed its proof") as aborted:
        demo.blue_green(f"{VARIANTS}:DemoCountsOneMore", spark)
    assert "the live stream ran on untouched" in str(aborted.value)
    record = read_history(demo.spec)[-1]
    assert record["result"] == "aborted", record
    steps = [s["step"] for s in record["steps"]]
    assert steps[-3:] == ["green_starting", "green_proof_failed", "aborted"], steps
    assert record["green_proof"]["counts"]["aggregates_mismatch"] >= 1, record["green_proof"]["counts"]
    assert record["green"]["table_prefix"].startswith("up_green_") and "events" in record["compared"]
    after = demo.status()
    assert after.pid == before.pid and pid_alive(before.pid) and after.last_batch_id > before.last_batch_id
    assert demo.registry.read_text() == text and active_checkpoint(demo.spec) == checkpoint
    assert list(rows(demo.spec, "events").columns) == columns
    green = load_registry(Path(record["green"]["registry"])).get(demo.name)
    assert not stream_liveness(green).running
    assert len(rows(green, "events")) > 0  # its tables stay for a look


def test_a_blue_green_cutover_loses_and_repeats_nothing(demo: Live, spark: Any) -> None:
    """Blue/green: a new version with a column added catches up beside the live one, is proven and compared
    (its insert-once rows equal the live ones on every shared column), then takes over: the live driver
    stops past it, the new one takes the next lease epoch (in its log) and re-reads the overlap. The last
    test proves the whole episode, this cutover included, exactly once from the data."""
    import re

    blue = demo.status()
    record = demo.blue_green(f"{VARIANTS}:DemoWithCentsSignAndDigits", spark)
    assert record["result"] == "upgraded", record
    steps = [s["step"] for s in record["steps"]]
    assert steps == ["preflight", "preflight_passed", "green_starting", "green_proven", "stopped", "switched",
                     "launched", "proving", "proven"], steps
    compared = record["compared"]["events"]
    assert compared["compared"] > 0 and compared["differing"] == 0 and "amount_sign" in compared["columns"], compared
    assert demo.spec.transform == f"{VARIANTS}:DemoWithCentsSignAndDigits"
    assert active_checkpoint(demo.spec) == record["green"]["checkpoint"] == record["checkpoint"]
    new = demo.status()
    assert new.pid != blue.pid and not pid_alive(blue.pid)
    logs = sorted((demo.home / "logs").glob("stream-*.log"), key=lambda f: int(f.stem.split("-")[1]))
    epochs = [int(m) for f in logs for m in re.findall(r"lease epoch (\d+), resuming", f.read_text())]
    assert len(epochs) >= 2 and epochs[-1] > epochs[-2], epochs  # the lease moved on at the switch
    wait_for(lambda: rows(demo.spec, "events")["amount_digits"].notna().any(), 120, "rows with amount_digits")


def test_the_whole_episode_is_exactly_once(demo: Live) -> None:
    from harness.processes import no_batch_in_flight

    from rewind.kafka.lookups import true_end_offsets
    from rewind.proof.verify import verify_stream

    demo.stop_producing.set()
    assert demo.producer is not None
    demo.producer.join(timeout=60)
    topic = demo.spec.topics[0]
    ends = {str(tp.partition): off for tp, off in true_end_offsets(demo.bootstrap, topic).items()}
    wait_for(lambda: (st := demo.status()) is not None and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()}
             == ends and no_batch_in_flight(active_checkpoint(demo.spec)), 240, f"catch-up to {ends}")
    assert stop_stream(demo.spec, timeout=120)
    report = verify_stream(demo.spec, demo.bootstrap)
    print(report.summary())
    assert report.ok, str(report)
    assert report.expected_dead_letters > 0 and report.duplicate_sends > 0 and report.windows_checked > 0
    assert [r["result"] for r in read_history(demo.spec)] == ["refused", "upgraded", "upgraded", "rolled_back",
                                                                   "refused", "rolled_back", "aborted", "upgraded"]


def test_a_column_added_in_stateless_mode(tmp_path: Path, platform: Any, spark: Any) -> None:
    """The inventory stream keeps no state: a new checkpoint starts at the committed offsets, and the
    contract proof holds every record once across the switch."""
    from rewind.inventory.producer import produce_inventory
    from rewind.kafka.lookups import true_end_offsets
    from rewind.proof.contract_proof import verify_contract_stream

    topic = f"upginv-{uuid.uuid4().hex[:8]}"
    registry = write_registry(tmp_path / "streams.yaml", inventory_stream(
        "inv", topic, tmp_path, trigger="1 second", savepoints="{schedule: null}"))
    live = Live("inv", registry, tmp_path, platform.kafka_bootstrap, platform.env(),
                S3Storage(S3Config.from_platform(platform)))
    live.producer = threading.Thread(target=produce_inventory, args=(platform.kafka_bootstrap, topic, 100_000, 3),
                                     kwargs={"malformed_every": 37, "unknown_every": 41, "rate": 25.0,
                                             "should_stop": live.stop_producing.is_set}, daemon=True)
    live.producer.start()
    try:
        live.start(live.spec)
        wait_for(live.committed_past(None), 240, "the first committed batch")
        checkpoint = active_checkpoint(live.spec)
        record = upgrade(live.request(f"{VARIANTS}:InventoryWithCents", "stateless"), live.store, live.bootstrap,
                         live.start, spark=spark)
        assert record["result"] == "upgraded", record
        fresh = Path(active_checkpoint(live.spec))
        assert fresh != Path(checkpoint) and ".stateless-" in fresh.name and not (fresh / "state").exists()
        wait_for(lambda: rows(live.spec, "stock")["value_cents"].notna().any(), 120, "rows with value_cents")
        live.stop_producing.set()
        live.producer.join(timeout=60)
        ends = {str(tp.partition): off for tp, off in true_end_offsets(live.bootstrap, topic).items()}
        wait_for(lambda: (st := live.status()) is not None
                 and {p: int(o) for p, o in st.end_offsets.get(topic, {}).items()} == ends, 240, f"catch-up to {ends}")
        assert stop_stream(live.spec, timeout=120)
    finally:
        live.close()
    report = verify_contract_stream(live.spec, live.bootstrap)
    assert report.ok, str(report)
    assert [r["result"] for r in read_history(live.spec)] == ["upgraded"]
