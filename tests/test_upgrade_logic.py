"""Upgrades and state rescales without services: the refusals, the compatibility rules, Spark's verdict,
the registry's text, the history and its guard, the rollback decision, and the repartition batch as
the inspector, the repair and the sink ledger see it."""

from __future__ import annotations

import io
import json
import zipfile
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from rewind.api.tables import Column, TableSpec
from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.repair import plan_repair, repair_checkpoint
from rewind.checkpoints.state_files import list_state
from rewind.registry import RestartSpec, load_registry
from rewind.storage import LocalStorage
from rewind.upgrade import guard, history
from rewind.upgrade.entry import EntryRefused, entry_text, load_candidate, with_entry
from rewind.upgrade.entry import write_registry as write_reg
from rewind.upgrade.repartition import CheckpointFacts, refusal
from rewind.upgrade.rules import Facts, contract_changes, incompatible, refusals, spark_verdict, table_changes
from rewind.upgrade.views import history_rows
from rewind.upgrade.watch import Attempt, next_step
from tests.harness.registry_templates import demo_stream, write_registry

ROOT = Path(__file__).resolve().parents[1]
CONF2 = {"spark.sql.streaming.stateStore.providerClass":
         "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
         "spark.sql.streaming.stateStore.encodingFormat": "unsaferow", "spark.sql.shuffle.partitions": "2"}


def registry(tmp_path: Path, transform: str = "rewind.demo.transform:DemoTransform", file: str = "streams.yaml",
             **extra: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_registry(tmp_path / file, demo_stream("demo", "t", tmp_path, transform=transform, **extra),
                          demo_stream("other", "u", tmp_path))


def entry_file(tmp_path: Path, transform: str, name: str = "e.yaml", **extra: str) -> str:
    return write_registry(tmp_path / name, demo_stream("demo", "t", tmp_path, transform=transform, **extra)).read_text()


# --------------------------------------------------------------------------- refusals before anything stops
def facts(tmp_path: Path, mode: str = "savepoint", force: bool = False, committed: int | None = 3,
          operators: tuple[str, ...] = ("0", "1"), **new: str) -> Facts:
    old = load_registry(registry(tmp_path)).get("demo")
    changed = load_registry(registry(tmp_path, "tests.harness.upgrade_variants:DemoWithCents", "new.yaml",
                                     **new)).get("demo")
    return Facts(mode, force, old, changed, committed, operators)


def test_modes_that_cannot_apply_are_refused_with_the_reason(tmp_path: Path) -> None:
    assert refusals(facts(tmp_path / "a")) == []
    assert any("drops the state of 2 stateful operator" in r for r in refusals(facts(tmp_path / "b", "stateless")))
    assert refusals(facts(tmp_path / "c", "stateless", force=True)) == []
    assert refusals(facts(tmp_path / "d", "stateless", operators=())) == []
    python_source = facts(tmp_path / "e", "stateless", operators=(),
                          source="{format: rewind_kafka, options: {startingOffsets: earliest}}")
    assert refusals(python_source) == []  # its driver reads the new checkpoint's start (tests/test_python_source_start)
    assert any("no committed batch" in r for r in refusals(facts(tmp_path / "f", committed=None)))
    assert any("is not one of" in r for r in refusals(facts(tmp_path / "g", "rolling")))
    assert refusals(facts(tmp_path / "g2", "blue-green")) == []
    same = facts(tmp_path / "h")
    assert any("nothing to upgrade" in r for r in refusals(Facts("savepoint", False, same.old, same.old, 3, ())))


def test_a_stream_with_its_checkpoint_in_s3_can_be_upgraded(tmp_path: Path) -> None:
    """Savepoints copy ``s3a://`` checkpoints inside S3 (a YARN stream's, tests/test_yarn.py upgrades one)."""
    on_s3 = {"checkpoint": "s3a://bucket/checkpoints/demo"}
    old = load_registry(registry(tmp_path, **on_s3)).get("demo")
    new = load_registry(registry(tmp_path, "tests.harness.upgrade_variants:DemoWithCents", "new.yaml",
                                 **on_s3)).get("demo")
    for mode in ("savepoint", "last-state"):
        assert refusals(Facts(mode, False, old, new, 3, ("0",))) == [], mode


def test_an_upgrade_keeps_the_stream_s_identity(tmp_path: Path) -> None:
    moved = facts(tmp_path, checkpoint=str(tmp_path / "elsewhere"))
    assert any(r.startswith("checkpoint changed") for r in refusals(moved))
    other_sink = facts(tmp_path / "s", sink='{url: "sqlite:////tmp/x.db", table_prefix: demo_}')
    assert any(r.startswith("sink.url changed") for r in refusals(other_sink))


# --------------------------------------------------------------------------- output tables and Spark's state check
T = TableSpec("t", (Column("id", "string", False), Column("v", "double"), Column("n", "bigint", False)), ("id",),
              "ignore")


def judged(new: TableSpec) -> list[tuple[str, bool]]:
    return [(c.what.split(":")[0].split(" (")[0], c.ok) for c in table_changes([T], [new])]


def test_columns_added_with_a_default_pass_keys_and_types_changed_do_not() -> None:
    cols = T.columns
    assert judged(TableSpec("t", (*cols, Column("w", "string")), ("id",), "ignore")) == [("column w", True)]
    assert judged(TableSpec("t", (*cols, Column("w", "string", False)), ("id",), "ignore")) == [("column w", False)]
    assert judged(TableSpec("t", cols, ("id", "n"), "ignore")) == [("key changed ['id'] -> ['id', 'n']", False)]
    assert judged(TableSpec("t", (cols[0], Column("v", "string"), cols[2]), ("id",), "ignore")) == [
        ("column v type changed double -> string", False)]
    assert judged(TableSpec("t", (cols[0], cols[2]), ("id",), "ignore")) == [("column v removed", False)]
    assert judged(TableSpec("t", (cols[0], Column("v", "double", False), cols[2]), ("id",), "ignore"))[0][1] is False
    assert judged(TableSpec("t", cols, ("id",), "replace"))[0][1] is False
    assert [c.ok for c in table_changes([T], [T, TableSpec("u", cols, ("id",), "ignore")])] == [True]
    assert [c.ok for c in table_changes([T], [])] == [False]


def test_the_test_versions_are_judged_as_their_docstrings_say() -> None:
    from rewind.demo.transform import DemoTransform
    from tests.harness import upgrade_variants as v

    assert incompatible(contract_changes(DemoTransform(), v.DemoWithCents())) == []
    assert incompatible(contract_changes(v.DemoWithCents(), v.DemoWithCentsAndSign())) == []
    assert incompatible(contract_changes(v.DemoWithCentsAndSign(), v.DemoFailsOnPoison())) == []
    assert incompatible(contract_changes(DemoTransform(), v.DemoDedupByEventAndKey())) == []  # Spark must see it
    assert incompatible(contract_changes(v.DemoWithCents(), DemoTransform())) == [
        "table events: column amount_cents removed: old rows hold it; keep it (nullable)"]


def test_an_aggregate_declared_differently_is_refused() -> None:
    from types import SimpleNamespace as NS

    def version(keys: tuple[str, ...]) -> NS:
        return NS(tables=[T], identity=None, dead_letter_table="dead_letter",
                  aggregates=(NS(table="t", keys=keys),))

    assert incompatible(contract_changes(version(("id",)), version(("id",)))) == []
    assert incompatible(contract_changes(version(("id",)), version(("id", "v"))))[0].startswith(
        "table t: aggregate changed")


def test_spark_s_state_errors_become_one_line_saying_what_changed() -> None:
    key = ("org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = 1] terminated with "
           "exception: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key "
           "schema. Please check number and type of fields. Existing key_schema=StructType(StructField(event_id,"
           "StringType,true)) and new key_schema=StructType(StructField(event_id,StringType,true),StructField(key,"
           "StringType,true)). If you want to force running the query without schema validation, please set ...")
    v = spark_verdict(key)
    assert v.state and v.error_class == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert v.reason.startswith("the state key schema changed") and "new key_schema=" in v.reason
    ops = spark_verdict("[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] ... Stateful operators in the "
                        "metadata: [(OperatorName: a)]; Stateful operators in current batch: [(OperatorName: b)].")
    assert ops.state and "stateful operators changed" in ops.reason
    assert "current batch: [(OperatorName: b)]" in ops.reason
    other = spark_verdict("py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: "
                          "Traceback (most recent call last):\n  File \"x.py\", line 1, in split\n    raise "
                          "ValueError(...)\nValueError: batch 7: cannot price key 'poison'\n\n\tat py4j.Protocol")
    assert not other.state and other.reason == "ValueError: batch 7: cannot price key 'poison'"


# --------------------------------------------------------------------------- the registry's text
def test_the_entry_is_replaced_and_every_other_line_kept() -> None:
    text = (ROOT / "streams.yaml").read_text()
    demo = entry_text(text, "demo")
    assert demo.startswith("demo:\n  topics: [demo-events]") and "inventory" not in demo
    changed = demo.replace("rewind.demo.transform:DemoTransform", "tests.harness.upgrade_variants:DemoWithCents")
    out = with_entry(text, "demo", changed)
    assert out.replace("tests.harness.upgrade_variants:DemoWithCents", "rewind.demo.transform:DemoTransform") == text
    assert with_entry(out, "demo", demo) == text
    assert entry_text(out, "inventory") == entry_text(text, "inventory")
    flow = "streams:\n  a: {topics: [x]}\n  'b':\n    topics: [y]\n\n    # inside b\n    partitions: 2\n\n# end\n"
    assert entry_text(flow, "b") == "'b':\n  topics: [y]\n\n  # inside b\n  partitions: 2\n"
    assert with_entry(flow, "a", "a: {topics: [z]}\n") == flow.replace("[x]", "[z]")
    with pytest.raises(EntryRefused, match="not an entry"):
        entry_text(flow, "c")


def test_a_new_entry_is_validated_as_the_registry_is(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    old, new, text, spec = load_candidate(reg, "demo", entry_file(tmp_path, "tests.harness.upgrade_variants:"
                                                                            "DemoWithCents"), "e.yaml")
    assert spec.transform.endswith("DemoWithCents") and "DemoTransform" in old and "DemoWithCents" in new
    assert load_registry_text(tmp_path, text).get("other") == load_registry(reg).get("other")
    whole = with_entry(reg.read_text(), "demo", new)  # an edited copy of the whole registry is fine too
    assert load_candidate(reg, "demo", whole, "copy.yaml")[3] == spec
    with pytest.raises(EntryRefused, match="also changes stream"):
        load_candidate(reg, "demo", whole.replace("[u]", "[v]"), "copy.yaml")
    with pytest.raises(EntryRefused, match=r"e\.yaml: streams\.demo\.trigger"):
        load_candidate(reg, "demo", entry_file(tmp_path, "x.y:Z", trigger="'5 secnds'"), "e.yaml")
    with pytest.raises(EntryRefused, match="expected a registry file"):
        load_candidate(reg, "demo", "demo: {topics: [t]}", "e.yaml")
    with pytest.raises(EntryRefused, match="changed while the upgrade ran"):
        write_reg(reg, "something else", text)


def load_registry_text(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "check.yaml").write_text(text)
    return load_registry(tmp_path / "check.yaml")


def test_bad_input_is_refused_in_one_line_with_exit_3(tmp_path: Path) -> None:
    """Before any service is asked: the CLI runs here with no Kafka and no S3 at all."""
    from rewind.cli.main import main

    reg = registry(tmp_path)
    synthetic_checkpoint(Path(load_registry(reg).get("demo").checkpoint))

    def run(entry: str, mode: str = "savepoint") -> tuple[int, str]:
        (tmp_path / "new.yaml").write_text(entry)
        err = io.StringIO()
        with redirect_stderr(err):
            code = main(["stream", "upgrade", "demo", "--registry", str(reg), "--registry-entry",
                         str(tmp_path / "new.yaml"), "--mode", mode, "--bootstrap", "127.0.0.1:1"])
        return code, err.getvalue()

    for entry, mode, says in [
        (entry_file(tmp_path, "rewind.nowhere:Transform"), "savepoint", "cannot import module 'rewind.nowhere'"),
        (entry_file(tmp_path, "tests.harness.upgrade_variants:DemoWithCents", window="'ten'"), "savepoint",
         "streams.demo.window"),
        (entry_file(tmp_path, "tests.harness.upgrade_variants:DemoWithCents"), "stateless", "drops the state of 1"),
    ]:
        code, err = run(entry, mode)
        said = [line for line in err.splitlines() if line.startswith(("refused", "error"))]
        assert code == 3 and len(said) == 1 and said[0].startswith("refused: ") and says in said[0], err
        assert "Traceback" not in err
    assert history.read_history(load_registry(reg).get("demo")) == []  # nothing started, nothing recorded


# --------------------------------------------------------------------------- history and guard
def test_history_records_are_saved_by_id_and_entries_kept_by_hash(tmp_path: Path) -> None:
    spec = load_registry(registry(tmp_path)).get("demo")
    history.save_record(spec, {"id": "2", "kind": "upgrade", "mode": "savepoint", "result": "running",
                               "from": {"transform": "a:A", "hash": "h1"}, "to": {"transform": "b:B", "hash": "h2"}})
    history.save_record(spec, {"id": "1", "kind": "repartition", "from": {"partitions": 2}, "to": {"partitions": 4},
                               "result": "repartitioned", "savepoint": {"id": "sp"}})
    history.save_record(spec, {**history.read_history(spec)[1], "result": "upgraded"})
    rows = history_rows(history.read_history(spec), newest_first=True)
    assert [(r["id"], r["result"], r["change"]) for r in rows] == [
        ("2", "upgraded", "A h1 -> B h2"), ("1", "repartitioned", "2 -> 4 state partitions")]
    history.keep_entry(spec, "h1", "demo:\n  topics: [t]\n", "a:A")
    assert history.kept_entry(spec, "h1") == "demo:\n  topics: [t]\n" and history.kept_entry(spec, "h9") is None


def test_one_upgrade_at_a_time_and_a_dead_holder_s_guard_is_taken_over(tmp_path: Path) -> None:
    spec = load_registry(registry(tmp_path)).get("demo")
    guard.take(spec, "u1", "upgrade savepoint")
    with pytest.raises(guard.UpgradeInProgress, match="upgrade savepoint u1"):
        guard.take(spec, "u2", "upgrade last-state")
    with pytest.raises(guard.UpgradeInProgress, match="still runs after 0s"):
        guard.wait_until_done(spec, timeout_s=0.0, sleep=lambda _s: None)
    doc = history.read_guard(spec)
    assert doc is not None and guard.stale({**doc, "pid": 2 ** 22 + 7}, doc["host"], lambda _p: False, doc["at"])
    assert not guard.stale(doc, "another-host", lambda _p: False, doc["at"] + 60)
    history.write_doc(spec, "upgrade", {**doc, "pid": 0})  # its holder is gone
    assert guard.live_guard(spec) is None and guard.wait_until_done(spec) is None
    guard.take(spec, "u2", "upgrade last-state")
    guard.release(spec, "u1")  # not the holder: nothing happens
    assert history.read_guard(spec)["id"] == "u2"  # type: ignore[index]
    guard.release(spec, "u2")
    assert history.read_guard(spec) is None


# --------------------------------------------------------------------------- the rollback decision
def test_the_new_version_is_rolled_back_on_a_crash_loop_or_after_the_grace() -> None:
    restart = RestartSpec(strategy="fixed-delay", max_attempts=1, delay="2 seconds")
    fail = Attempt(100.0, False, "query_failed", "ValueError: poison", 7)
    assert next_step([Attempt(100.0, True)], restart, 0.0, 100.0, 180.0).action == "healthy"
    again = next_step([fail], restart, 0.0, 100.0, 180.0)
    assert (again.action, again.delay_s) == ("relaunch", 2.0)
    loop = next_step([fail, fail], restart, 0.0, 120.0, 180.0)
    assert (loop.action, loop.reason) == ("rollback", "crash loop: the new version failed 2 times in a row without "
                                                      "committing past batch 7; last: query_failed: ValueError: poison")
    late = next_step([Attempt(181.0, False, "no_progress", "no batch", 7)], restart, 0.0, 181.0, 180.0)
    assert late.action == "rollback" and "startup grace of 180s" in late.reason
    short = next_step([fail], RestartSpec(strategy="fixed-delay", max_attempts=5, delay="60 seconds"), 0.0, 150.0,
                      180.0)
    assert short.action == "relaunch" and short.delay_s == 30.0  # never sleeps past the grace


# --------------------------------------------------------------------------- the repartition batch
def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("placeholder", "x")
    return buf.getvalue()


def synthetic_checkpoint(root: Path, repartition_at: int | None = None) -> Path:
    """Batches 0..3 on 2 state partitions of one operator (changelogs), and, with ``repartition_at`` R,
    Spark's repartition batch R (offsets and commit of R-1, 4 partitions, version R+1 snapshots) and a
    data batch R+1 after it."""
    end = {0: 10, 1: 20, 2: 30, 3: 40}
    last = 3 if repartition_at is None else repartition_at + 1

    def offsets(b: int, parts: int, source: int) -> str:
        meta = {"batchWatermarkMs": 1000 * source, "batchTimestampMs": 5,
                "conf": {**CONF2, "spark.sql.shuffle.partitions": str(parts)}}
        return "v1\n" + json.dumps(meta) + "\n" + json.dumps({"t": {"0": source}})

    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    for b in range(last + 1):
        if repartition_at is not None and b == repartition_at:
            text, parts = offsets(b, 4, end[b - 1]), 4
        elif repartition_at is not None and b > repartition_at:
            text, parts = offsets(b, 4, end[repartition_at - 1] + 10 * (b - repartition_at)), 4
        else:
            text, parts = offsets(b, 2, end[b]), 2
        (root / "offsets" / str(b)).write_text(text)
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        for p in range(parts):
            d = root / "state" / "0" / str(p)
            d.mkdir(parents=True, exist_ok=True)
            if repartition_at is not None and b == repartition_at:
                (d / f"{b + 1}.zip").write_bytes(_zip())
            else:
                (d / f"{b + 1}.changelog").write_bytes(b"c")
    (root / "state" / "0" / "_metadata").mkdir(parents=True, exist_ok=True)
    (root / "state" / "0" / "_metadata" / "metadata").write_text("v1\n{}")
    return root


def test_the_inspector_names_the_repartition_batch_and_judges_earlier_batches_on_their_partitions(
        tmp_path: Path) -> None:
    cp = synthetic_checkpoint(tmp_path / "cp", repartition_at=3)
    report = inspect_checkpoint(cp)
    assert report.last_complete == 4 and not report.errors
    assert report.batch(3).repartition and report.batch(3).partitions == 4  # type: ignore[union-attr]
    assert [p.detail for p in report.problems if p.kind == "repartition"] == [
        "batch 3 is a state repartition (Spark's offline repartition, no data): 2 -> 4 state partitions"]
    (cp / "state" / "0" / "2" / "4.zip").write_bytes(b"")  # the repartitioned state lost in a new partition
    for b in (4,):
        (cp / "commits" / str(b)).unlink()
    damaged = inspect_checkpoint(cp)
    assert damaged.last_complete == 2, damaged.problems  # batch 2 ran on partitions 0 and 1 only


def test_a_repair_across_the_repartition_batch_lets_spark_plan_it_again(tmp_path: Path) -> None:
    cp = synthetic_checkpoint(tmp_path / "cp", repartition_at=3)
    (cp / "state" / "0" / "3" / "4.zip").write_bytes(b"")
    plan = plan_repair(inspect_checkpoint(cp, full=True), list_state(LocalStorage(cp)))
    moved = {m.file: m.reason for m in plan.moves}
    assert plan.rolled_back_to == 2 and plan.keeps_planned_batch is None
    assert "state repartition" in moved["offsets/3"] and {"commits/3", "commits/4", "offsets/4"} <= set(moved)
    assert {f"state/0/{p}/4.zip" for p in range(4)} <= set(moved)
    record = repair_checkpoint(cp)
    assert record["result"] == "repaired" and inspect_checkpoint(cp).last_complete == 2


def test_the_sink_ledger_sees_the_batch_after_a_repartition_start_where_the_last_one_ended(tmp_path: Path) -> None:
    from rewind.driver.batch_writer import BatchWriter

    cp = synthetic_checkpoint(tmp_path / "cp", repartition_at=3)
    ident = {b: json.loads(BatchWriter(None, lambda f, b: {}, str(cp)).source_offsets(b) or "{}") for b in (2, 4)}
    assert ident[4]["start"] == ident[2]["end"] == {"t": {"0": 30}}  # nothing re-read, nothing skipped
    assert ident[4]["end"] == {"t": {"0": 40}} and ident[4]["watermark_ms"] == 40000


def test_spark_cannot_repartition_every_checkpoint_and_the_refusal_says_why() -> None:
    ok = CheckpointFacts("/cp", 7, CONF2, ("0", "1"), ("changelog", "zip"))
    assert refusal(ok, 4) is None
    hdfs = CheckpointFacts("/cp", 7, {**CONF2, "spark.sql.streaming.stateStore.providerClass":
                                      "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"},
                           ("0",), ("delta", "snapshot"))
    assert "HDFSBackedStateStoreProvider (HDFS-backed files)" in str(refusal(hdfs, 4))
    old = CheckpointFacts("/cp", 7, {k: v for k, v in CONF2.items() if "encodingFormat" not in k}, ("0",), ("zip",))
    assert "written before Spark 4.0" in str(refusal(old, 4))
    assert "already has 2 partitions" in str(refusal(ok, 2))
    assert "no stateful operator" in str(refusal(CheckpointFacts("/cp", 7, CONF2, ()), 4))
    assert "not on local disk" in str(refusal(CheckpointFacts("s3a://b/cp", 7, CONF2, ("0",)), 4))
    assert "no committed batch" in str(refusal(CheckpointFacts("/cp", None, {}, ()), 4))
    assert "at least 1" in str(refusal(ok, 0))
    assert "PySpark 4.2 on" in str(refusal(ok, 4, can_repartition=False))


# --------------------------------------------------------------------------- the pre-flight's ranges and counts
def test_the_preflight_runs_on_the_newest_committed_records_of_every_partition() -> None:
    from rewind.kafka.types import TP
    from rewind.upgrade.preflight import newest_ranges

    ends = {("t", 0): 1_000, ("t", 1): 150, ("t", 2): 40, ("t", 3): 0}
    earliest = {TP("t", 0): 0, TP("t", 1): 0, TP("t", 2): 30, TP("t", 3): 0}
    assert newest_ranges(ends, earliest, 200) == {TP("t", 0): (800, 1_000), TP("t", 1): (0, 150),
                                                  TP("t", 2): (30, 40)}  # none before the earliest, none empty


def test_the_preflight_counts_records_by_offsets_not_by_source_reads() -> None:
    from rewind.upgrade.preflight import records_in

    progress = {"numInputRows": 1_992, "sources": [{"startOffset": '{"t": {"0": 100, "1": 50}}',
                                                    "endOffset": '{"t": {"0": 350, "1": 300}}'}]}
    assert records_in(progress) == 500  # a transform that reads its batch four times counts 1,992 rows
    assert records_in({"sources": [{"startOffset": None, "endOffset": {"t": {"0": 7}}}]}) == 0
    assert records_in({}) == 0


# --------------------------------------------------------------------------- blue/green, pure parts
def test_green_runs_on_its_own_checkpoint_store_status_and_tables(tmp_path: Path) -> None:
    from rewind.upgrade.bluegreen import green_entry

    entry = entry_text(entry_file(tmp_path, "tests.harness.upgrade_variants:DemoWithCents",
                                  control=f"{tmp_path}/shared-control", supervision="{standby: true}"), "demo")
    text = green_entry(entry, "demo", f"{tmp_path}/checkpoints/demo.green-r1", f"{tmp_path}/g/status",
                       "demo_shadow_green_r1_")
    (tmp_path / "green.yaml").write_text(text)
    green = load_registry(tmp_path / "green.yaml").get("demo")
    live = load_registry(write_registry(tmp_path / "live.yaml", demo_stream("demo", "t", tmp_path))).get("demo")
    assert green.transform == "tests.harness.upgrade_variants:DemoWithCents" and green.topics == live.topics
    assert green.checkpoint.endswith("demo.green-r1") and green.status_dir.endswith("g/status")
    assert green.control is None  # beside its own checkpoint: a lease of its own, never the live stream's
    assert green.sink.url == live.sink.url and green.sink.table_prefix == "demo_shadow_green_r1_"
    assert green.savepoints.schedule is None and green.supervision.standby is False


def test_green_s_tables_have_a_prefix_the_registry_takes() -> None:
    from rewind.registry import SinkSpec
    from rewind.upgrade.bluegreen import green_prefix

    for prefix in ("", "bg_", "a_very_long_prefix_of_thirty_1_"[:31]):
        one, two = green_prefix(prefix, "20261128T221207Z-acc2"), green_prefix(prefix, "20261128T221207Z-acc3")
        assert one != two and len(one) <= 31 and one.startswith(prefix[:18])
        assert SinkSpec(url="sqlite:///x.db", table_prefix=one).table_prefix == one  # the registry's validator


def test_green_reaches_the_live_offsets_only_on_every_partition() -> None:
    from rewind.upgrade.bluegreen import behind_or_at

    blue = {("t", 0): 10, ("t", 1): 20}
    assert behind_or_at({("t", 0): 10, ("t", 1): 21}, blue)
    assert not behind_or_at({("t", 0): 9, ("t", 1): 99}, blue)
    assert not behind_or_at({("t", 0): 10}, blue)  # a partition not read yet
    assert not behind_or_at(None, blue) and not behind_or_at(blue, None)


def test_green_s_rows_are_compared_by_type_and_only_for_insert_once_tables() -> None:
    import pandas as pd

    from rewind.api import Column, TableSpec
    from rewind.upgrade.bluegreen import compare_rows

    events = TableSpec("events", (Column("id", "string"), Column("total", "decimal(18,2)"),
                                  Column("batch_id", "bigint")), ("id",), "ignore")
    totals = TableSpec("totals", (Column("k", "string"), Column("n", "bigint")), ("k",), "replace")
    from decimal import Decimal

    live = {"events": pd.DataFrame({"id": ["a", "b", "c"], "total": [Decimal("30190708.01"), Decimal("1.00"),
                                                                     Decimal("2.50")], "batch_id": [1, 1, 2]}),
            "totals": pd.DataFrame({"k": ["x"], "n": [5]})}
    green = {"events": pd.DataFrame({"id": ["a", "b", "d"], "total": [Decimal("30190708.02"), Decimal("1.00"),
                                                                      Decimal("9.00")], "batch_id": [7, 8, 9],
                                     "extra": [1, 2, 3]}),
             "totals": pd.DataFrame({"k": ["x"], "n": [6]})}
    out = compare_rows([events, totals], live, green)
    assert set(out) == {"events"}  # totals change as windows fill: the proof judges them
    assert out["events"]["compared"] == 2 and out["events"]["differing"] == 1 and out["events"]["columns"] == ["total"]
    assert out["events"]["examples"][0]["id"] == "a"  # one cent on a large value differs; batch ids do not count
