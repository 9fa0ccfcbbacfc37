"""Blue/green upgrades end to end (``rewind stream upgrade --mode blue-green``), on one demo stream while a
producer writes the whole time (malformed, late and duplicate records included):

1. a new version whose totals are one too many runs beside the live one into shadow tables, fails its proof
   there and is stopped: the live driver (same pid) ran on and committed meanwhile, its registry entry, its
   tables' columns and its checkpoint are as they were;
2. a new version with a column added runs beside it, catches up, is proven and compared with the live rows,
   then takes over: the live driver stops past it, the new one takes the next lease epoch (in its log) and
   re-reads the overlap. Afterwards every Kafka record is in the sink once (events or dead letters) and every
   window equals its recomputation (``verify_stream``), with the producer stopped and the stream caught up.

The command line's launch path is used for both drivers (``launch_stream``); the pre-flight runs in this
process's Spark session (``tests/test_upgrade.py`` and ``tests/test_yarn.py`` run it as a job).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.processes import no_batch_in_flight, wait_for

from rewind.checkpoints.pointer import active_checkpoint
from rewind.registry import load_registry
from rewind.runtime.processes import pid_alive
from rewind.storage import S3Config, S3Storage
from rewind.supervision.process_control import launch_stream, stop_stream, wait_running
from rewind.upgrade.bluegreen import BlueGreenAborted
from rewind.upgrade.history import read_history
from rewind.upgrade.run import UpgradeRequest, upgrade
from tests.harness.registry_templates import demo_stream, write_registry
from tests.test_upgrade import Live, rows

pytestmark = pytest.mark.slow
VARIANTS = "tests.harness.upgrade_variants"


class BlueGreenLive(Live):
    def launch_green(self, spec: Any, registry: Path) -> int:
        log = registry.with_suffix(".log")
        pid = launch_stream(spec, registry, self.bootstrap, log, env=self.env)
        self.pids.append(pid)
        return wait_running(spec, pid, timeout=300.0, log_path=log).pid

    def blue_green(self, transform: str, spark: Any) -> dict[str, Any]:
        req = UpgradeRequest(self.name, str(self.registry), self.entry(transform), "new.yaml", "blue-green",
                             grace_s=240.0)
        return upgrade(req, self.store, self.bootstrap, self.start, spark=spark, launch_green=self.launch_green)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, platform: Any) -> Iterator[BlueGreenLive]:
    from rewind.demo.producer import ProduceSpec, produce

    home = tmp_path_factory.mktemp("bluegreen")
    topic = f"bg-{uuid.uuid4().hex[:8]}"
    registry = write_registry(home / "streams.yaml", demo_stream(
        "bg", topic, home, max_offsets=5000, trigger="1 second", window="5 seconds", watermark_delay="10 seconds",
        allowed_lateness="5 seconds", restart="{strategy: fixed-delay, max_attempts: 1, delay: 1 second}",
        supervision="{startup_grace: 4 min}", savepoints="{schedule: null}"))
    live = BlueGreenLive("bg", registry, home, platform.kafka_bootstrap, platform.env(),
                         S3Storage(S3Config.from_platform(platform)))
    spec = ProduceSpec(topic=topic, count=1_000_000, rate=25, partitions=3, id_prefix="bg", malformed_every=97,
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


def test_an_aborted_blue_green_leaves_the_live_stream_untouched(demo: BlueGreenLive, spark: Any) -> None:
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
    shadow = record["green"]["table_prefix"]
    assert shadow.startswith("bg_green_") and "events" in record["compared"]
    # the live driver ran on: the same process, batches committed meanwhile, nothing of it changed
    after = demo.status()
    assert after.pid == before.pid and pid_alive(before.pid) and after.last_batch_id > before.last_batch_id
    assert demo.registry.read_text() == text and active_checkpoint(demo.spec) == checkpoint
    assert list(rows(demo.spec, "events").columns) == columns  # the new version's columns are in its shadow only
    green = load_registry(Path(record["green"]["registry"])).get("bg")
    assert not stream_running(green)
    assert "amount_sign" in rows(green, "events").columns  # its shadow tables stay for a look


def stream_running(spec: Any) -> bool:
    from rewind.supervision.process_control import stream_liveness

    return bool(stream_liveness(spec).running)


def test_a_blue_green_cutover_loses_and_repeats_nothing(demo: BlueGreenLive, spark: Any) -> None:
    from rewind.kafka.lookups import true_end_offsets
    from rewind.proof.verify import verify_stream

    blue = demo.status()
    record = demo.blue_green(f"{VARIANTS}:DemoWithCents", spark)
    assert record["result"] == "upgraded", record
    steps = [s["step"] for s in record["steps"]]
    assert steps[:3] == ["preflight", "preflight_passed", "green_starting"], steps
    assert steps[3:] == ["green_proven", "stopped", "switched", "launched", "proving", "proven"], steps
    compared = record["compared"]["events"]
    assert compared["compared"] > 0 and compared["differing"] == 0, compared
    assert demo.spec.transform == f"{VARIANTS}:DemoWithCents"
    assert active_checkpoint(demo.spec) == record["green"]["checkpoint"] == record["checkpoint"]
    # the lease moved: the new driver took the epoch after the live one's, as its log says
    new = demo.status()
    assert new.pid != blue.pid and not pid_alive(blue.pid)
    log = (demo.home / "logs").glob("stream-*.log")
    epochs = [int(m) for f in sorted(log) for m in re.findall(r"lease epoch (\d+), resuming", f.read_text())]
    assert len(epochs) >= 2 and epochs[-1] > epochs[-2], epochs
    wait_for(lambda: rows(demo.spec, "events")["amount_cents"].notna().any(), 120, "rows with amount_cents")

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
    assert [r["result"] for r in read_history(demo.spec)] == ["aborted", "upgraded"]
