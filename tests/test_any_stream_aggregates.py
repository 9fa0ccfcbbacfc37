"""Issue 26 on a stream of its own: aggregates proven by value, replays that never write a partial total.

The stream (``tests/streams/payments_stream.py``) is written with ``build`` and table declarations
only (no ``split``, no ``expect``, no columns): an insert-once ``payments`` table and a per-merchant,
per-minute ``merchant_totals`` aggregate. Records come from confluent-kafka, keyless (sticky
partitioning), over 4 partitions, with malformed records, re-sends and, after the stream caught up,
records behind its watermark. The stream process is SIGKILLed once mid-run and restarted.

Every total is held to an oracle computed here from Kafka with a plain consumer and ``json`` (not
the code under test). Each proof is shown to fail on the damage it claims to catch: a total changed
by one unit, an aggregate row deleted or duplicated, a payment altered, deleted or duplicated, the
partition-only totals the old replay wrote, a record re-sent into a Kafka sink topic.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
STREAMS = ROOT / "tests" / "streams"
if str(STREAMS) not in sys.path:
    sys.path.insert(0, str(STREAMS))

N, PARTITIONS, MERCHANTS, LATE = 2400, 4, 5, 12
REPLAYED = 2  # the partition the on-call replays of the issue replay
WINDOW_KEYS = {"window": "1 minute", "watermark_delay": "2 minutes", "trigger": "1 second",
               "dq_suite": "contract", "transform": "payments_stream:PaymentsTransform"}


# --------------------------------------------------------------------------- helpers
def payment(i: int, at: datetime) -> bytes:
    return json.dumps({"payment_id": f"pay-{i}", "merchant": f"m{i % MERCHANTS}",
                       "amount": round(1 + (i * 37) % 500 / 7, 2), "ts": at.isoformat()}).encode()


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    """Keyless records with confluent-kafka's default (sticky) partitioner, in bursts (or all to ``partition``)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for n, value in enumerate(values, 1):
        producer.produce(topic, value=value, **({} if partition is None else {"partition": partition}))
        if n % 150 == 0:
            producer.flush(30)
            time.sleep(0.02)  # the sticky partitioner moves on between bursts
    assert producer.flush(30) == 0


class Driver:
    """``rewind stream run`` as a child in its own process group (SIGKILL = a crash)."""

    def __init__(self, registry: Path, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.registry, self.name, self.env, self.log_dir, self.runs = registry, name, env, log_dir, 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, bootstrap: str) -> None:
        self.runs += 1
        with open(self.log_dir / f"run{self.runs}.log", "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "rewind.cli", "stream", "run", self.name,
                                          "--registry", str(self.registry), "--bootstrap", bootstrap],
                                         stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tail(self) -> str:
        return (self.log_dir / f"run{self.runs}.log").read_text(errors="replace")[-3000:]


def committed(spec: Any) -> tuple[int, int]:
    from rewind.control.status import read_status
    from rewind.paths import status_file

    st = read_status(status_file(spec))
    done = sum(int(o) for parts in (st.end_offsets if st and st.end_offsets else {}).values() for o in parts.values())
    return done, -1 if st is None or st.last_batch_id is None else int(st.last_batch_id)


def wait_for(check: Any, timeout: float, what: str, driver: Driver) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert driver.proc is not None and driver.proc.poll() is None, f"stream exited: {driver.tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {driver.tail()}"
        time.sleep(1)


def late_window(bootstrap: str, topic: str, base: datetime) -> datetime:
    """A minute the stream has closed in which partition ``REPLAYED`` holds no payment (the first minute
    if it holds one in each): late records put there make groups that only late records of that
    partition name, the case a replay of the partition must still repair."""
    from rewind.proof.verify import read_records

    held = set()
    for r in read_records(bootstrap, [topic]):
        if r.partition == REPLAYED:
            try:
                held.add(datetime.fromisoformat(json.loads(r.value or b"")["ts"]).replace(second=0, microsecond=0))
            except (ValueError, KeyError, TypeError):
                continue
    free = [base + timedelta(minutes=k) for k in range(5) if base + timedelta(minutes=k) not in held]
    return free[0] if free else base


def end_of(bootstrap: str, topic: str) -> int:
    from rewind.kafka.lookups import true_end_offsets

    return sum(true_end_offsets(bootstrap, topic).values())


def db(spec: Any) -> Path:
    return Path(spec.sink.url.removeprefix("sqlite:///"))


def totals(spec: Any) -> pd.DataFrame:
    with sqlite3.connect(db(spec)) as conn:
        frame = pd.read_sql(f"SELECT window_start, merchant, total, payments FROM {spec.sink.table_prefix}"
                            "merchant_totals ORDER BY 1, 2", conn)
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame


def oracle(spec: Any, bootstrap: str, *, with_late: bool) -> pd.DataFrame:
    """Every per-merchant, per-minute total from Kafka (plain consumer, json), the stream's late records
    left out unless ``with_late``, only windows the stream's watermark has closed."""
    from rewind.checkpoints.watermark import stream_watermark
    from rewind.proof.verify import read_records

    with sqlite3.connect(db(spec)) as conn:
        late = set(conn.execute(f"SELECT topic, partition, \"offset\" FROM {spec.sink.table_prefix}dead_letter "
                                "WHERE reason = 'behind_watermark'").fetchall())
    seen, rows = set(), []
    for r in sorted(read_records(bootstrap, spec.topics), key=lambda r: (r.partition, r.offset)):
        try:
            doc = json.loads(r.value or b"")
            at = datetime.fromisoformat(doc["ts"])
            row = (doc["payment_id"], doc["merchant"], float(doc["amount"]), at)
        except (ValueError, KeyError, TypeError):
            continue
        if row[0] in seen or (not with_late and (r.topic, r.partition, r.offset) in late):
            continue
        seen.add(row[0])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["payment_id", "merchant", "amount", "event_time"])
    frame["window_start"] = pd.to_datetime(frame["event_time"], utc=True).dt.floor("1min")
    out = frame.groupby(["window_start", "merchant"]).agg(total=("amount", "sum"), payments=("amount", "size"))
    closed = stream_watermark(spec, None)[0]
    out = out.reset_index()
    return out[out["window_start"] + pd.Timedelta(minutes=1) <= pd.Timestamp(closed)].reset_index(drop=True)


def assert_totals_equal_kafka(spec: Any, bootstrap: str, *, with_late: bool = False) -> int:
    want = oracle(spec, bootstrap, with_late=with_late).set_index(["window_start", "merchant"])
    got = totals(spec).set_index(["window_start", "merchant"])
    assert len(want) >= 20, f"too few closed groups to prove anything: {len(want)}"
    for key, row in want.iterrows():
        assert key in got.index, f"closed group {key} missing from the sink"
        have = got.loc[key]
        assert abs(have["total"] - row["total"]) < 1e-6 and int(have["payments"]) == int(row["payments"]), (
            key, dict(have), dict(row))
    return len(want)


def cli(*argv: str) -> tuple[int, str, str]:
    """``rewind ...`` in this process (the session's Spark is the active one), with its output."""
    import contextlib
    import io

    from rewind.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- the stream, crashed and restarted
@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, platform: Any, spark: Any) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    t0 = time.perf_counter()
    work = tmp_path_factory.mktemp("payments")
    bootstrap = platform.kafka_bootstrap
    topic = f"pay-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        fut.result(30)
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
    values: list[bytes] = []
    for i in range(N):
        values.append(b"{not json" if i % 101 == 100 else payment(i, base + timedelta(milliseconds=200 * i)))
        if i % 37 == 0:
            values.append(values[-1])  # a re-send: one payment, two records
    produce(bootstrap, topic, values)
    reg = write_registry(work / "streams.yaml",
                         demo_stream("pay", topic, work, max_offsets=400, **WINDOW_KEYS),
                         demo_stream("pay_copy", topic, work, **{**WINDOW_KEYS, "sink": f'{{url: "sqlite:///{work}/'
                                     f'copy.db", table_prefix: pay_}}', "checkpoint": f"{work}/checkpoints/pay"}),
                         demo_stream("pay_undeclared", topic, work, **{
                             **WINDOW_KEYS, "transform": "payments_stream:Undeclared",
                             "sink": f'{{url: "sqlite:///{work}/sink-pay.db", table_prefix: pay_}}'}),
                         demo_stream("pay_expect", topic, work, **{  # the same sink, proven through expect()
                             **WINDOW_KEYS, "transform": "payments_stream:PaymentsWithExpect",
                             "sink": f'{{url: "sqlite:///{work}/sink-pay.db", table_prefix: pay_}}',
                             "checkpoint": f"{work}/checkpoints/pay"}))
    spec = load_registry(reg).get("pay")
    env = {**os.environ, **platform.env(), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(STREAMS)])}
    driver = Driver(reg, "pay", env, work)
    try:
        driver.start(bootstrap)
        wait_for(lambda: committed(spec)[1] >= 2, 300, "3 committed batches", driver)
        driver.kill()  # a crash mid-run: the next batch re-runs on the same offsets
        driver.start(bootstrap)
        wait_for(lambda: committed(spec)[0] >= end_of(bootstrap, topic), 300, "the backlog", driver)
        # records minutes behind the watermark: the stream routes them to the dead letters (as it may have
        # routed some of the backlog already: keyless bursts read side by side run its watermark ahead)
        # Half of them in a minute partition REPLAYED holds no payment of, half in a minute no record
        # holds (groups that only late records make: the stream writes no row for them).
        window, empty = late_window(bootstrap, topic, base), base - timedelta(minutes=3)
        produce(bootstrap, topic, [payment(N + j, (window if j % 2 else empty) + timedelta(seconds=20 + j))
                                   for j in range(LATE)], partition=REPLAYED)
        wait_for(lambda: committed(spec)[0] >= end_of(bootstrap, topic), 180, "the late records", driver)
    finally:
        driver.stop()
    print(f"payments stream: {len(values) + LATE} records, 1 SIGKILL, {driver.runs} runs in "
          f"{time.perf_counter() - t0:.0f}s; late records in minutes {window:%H:%M} and {empty:%H:%M} of partition "
          f"{REPLAYED}")
    return {"spec": spec, "reg": str(reg), "bootstrap": bootstrap, "topic": topic, "work": work, "base": base,
            "late_windows": (window, empty)}


def test_verify_passes_and_every_total_equals_kafka(run: dict[str, Any]) -> None:
    code, out, err = cli("verify", "pay", "--all", "--json", "--registry", run["reg"], "--bootstrap", run["bootstrap"])
    report = json.loads(out)
    assert code == 0, out
    assert report["aggregates_checked"] >= 20 and report["aggregates_mismatch"]["count"] == 0, report
    assert "no expect()" in err
    with sqlite3.connect(db(run["spec"])) as conn:
        late = conn.execute("SELECT COUNT(*) FROM pay_dead_letter WHERE reason = 'behind_watermark'").fetchone()[0]
    assert late >= LATE, "the late records did not arrive behind the watermark: the test proves nothing"
    run["late"] = late
    assert_totals_equal_kafka(run["spec"], run["bootstrap"])


def test_replay_of_one_partition_never_shrinks_a_total(run: dict[str, Any]) -> None:
    """The on-call command of the issue: every partition's totals stay whole; late records are named late."""
    before = totals(run["spec"])
    code, out, _ = cli("replay", "run", "pay", "--from", "earliest", "--to", "latest", "--partitions", str(REPLAYED),
                       "--registry", run["reg"], "--bootstrap", run["bootstrap"], "--no-s3", "--json", "--no-progress")
    report = json.loads(out)
    assert code == 0, out
    agg = report["aggregates"]["merchant_totals"]
    assert agg["touched"] > 0 and agg["recomputed"] > 0 and agg["written"] == 0, agg
    pd.testing.assert_frame_equal(totals(run["spec"]), before)
    c = report["counts"]
    assert c["records_read"] == c["events_out"] + c["dead_letters_out"] + c["late"] + c["duplicates_collapsed"]
    assert report["proof"]["ok"] and report["proof"]["counts"]["aggregates_checked"] > 0, report["proof"]["text"]
    from rewind.replay.report import ReplayReport, format_report

    text = format_report(ReplayReport.from_json(report))
    print(text)
    assert f"{c['late']} behind the watermark (left dead letters" in text
    assert "recomputed from all their records" in text
    assert_totals_equal_kafka(run["spec"], run["bootstrap"])


def test_the_old_partial_replay_fails_every_proof_and_a_replay_repairs_it(run: dict[str, Any], spark: Any) -> None:
    """What the old replay did (partition 2's own sums, its late records counted, upserted over the totals)
    fails verify, naming the table, the group and both values; a replay of that partition writes every
    total back whole, and removes the rows of groups that only late records make (kept in its run dir)."""
    from rewind.api.contract import load_transform
    from rewind.driver.bounded import build_batch, partitions_of
    from rewind.driver.runner import open_sink
    from rewind.kafka.types import TP

    spec, bootstrap = run["spec"], run["bootstrap"]
    transform = load_transform(spec)
    earliest, ends = partitions_of(spec, bootstrap)
    part = {tp: (earliest[tp], ends[tp]) for tp in earliest if tp == TP(run["topic"], REPLAYED)}
    partial = build_batch(spark, spec, transform, bootstrap, part, earliest=earliest, kinds=["merchant_totals"])
    closed = partial["merchant_totals"][partial["merchant_totals"]["window_start"] < totals(spec)["window_start"].max()]
    window, empty = (pd.Timestamp(w) for w in run["late_windows"])
    unsupported = closed[closed["window_start"] == empty]
    print(f"damage: {len(closed)} partial totals, {(closed['window_start'] == window).sum()} in minute "
          f"{window:%H:%M}, {len(unsupported)} in minute {empty:%H:%M} (only late records)")
    assert len(unsupported) > 0, "the damage holds no group that only late records make: the test proves less"
    with open_sink(spec, transform) as sink:
        sink.write_rows({"merchant_totals": closed})
    code, out, _ = cli("verify", "pay", "--all", "--json", "--registry", run["reg"], "--bootstrap", bootstrap)
    report = json.loads(out)
    assert code == 4 and report["aggregates_mismatch"]["count"] > 0, report
    assert report["aggregates_unexpected"]["count"] == len(unsupported), report["aggregates_unexpected"]
    example = report["aggregates_mismatch"]["examples"][0]["disagrees"]
    assert example.startswith("merchant_totals [") and "total: sink" in example and "recomputed" in example
    code, out, _ = cli("replay", "run", "pay", "--from", "earliest", "--to", "latest", "--partitions", str(REPLAYED),
                       "--registry", run["reg"], "--bootstrap", bootstrap, "--no-s3", "--json", "--no-progress")
    assert code == 0, out
    outcome = json.loads(out)["aggregates"]["merchant_totals"]
    assert outcome["written"] > 0 and outcome["removed"] == len(unsupported), outcome
    kept = pd.read_json(outcome["removed_to"], lines=True)
    assert len(kept) == len(unsupported) and set(kept["merchant"]) == set(unsupported["merchant"]), kept
    assert not (totals(spec)["window_start"] == empty).any()
    assert_totals_equal_kafka(spec, bootstrap)


DAMAGE = {
    "a total off by one": ("UPDATE pay_merchant_totals SET total = total + 1 WHERE rowid = "
                           "(SELECT MIN(rowid) FROM pay_merchant_totals)", "aggregates_mismatch", "total: sink"),
    "an aggregate row deleted": ("DELETE FROM pay_merchant_totals WHERE rowid = (SELECT MIN(rowid) FROM "
                                 "pay_merchant_totals)", "aggregates_missing", None),
    "an aggregate row duplicated": ("INSERT INTO pay_merchant_totals SELECT * FROM pay_merchant_totals LIMIT 1",
                                    "aggregates_duplicate", None),
    "a payment altered": ("UPDATE pay_payments SET amount = amount + 1 WHERE rowid = (SELECT MIN(rowid) FROM "
                          "pay_payments)", "rows_value_mismatch", "amount: sink"),
    "a payment deleted": ("DELETE FROM pay_payments WHERE rowid = (SELECT MIN(rowid) FROM pay_payments)",
                          "records_missing", None),
    "a payment duplicated": ("INSERT INTO pay_payments SELECT * FROM pay_payments LIMIT 1", "rows_duplicate_key",
                             None),
}


def _damaged_copy(run: dict[str, Any], sql: str) -> None:
    """The sink copied to pay_copy's database, its tables without primary keys (as a sink without
    constraints would hold them), then damaged."""
    copy = run["work"] / "copy.db"
    shutil.copy(db(run["spec"]), copy)
    with sqlite3.connect(copy) as conn:
        for table in ("pay_payments", "pay_merchant_totals"):
            conn.execute(f"CREATE TABLE {table}_x AS SELECT * FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {table}_x RENAME TO {table}")
        conn.execute(sql)


#: The Kafka side of ``verify pay_copy --all`` (``build`` as a bounded batch in Spark: over the whole range,
#: over the records its deduplication left without a row, over every record for the aggregates), by
#: its arguments. It depends on the topic and the dead letters only, which no damage touches.
_KAFKA_SIDE: dict[tuple[Any, ...], dict[str, pd.DataFrame]] = {}


@pytest.fixture
def kafka_side_built_once() -> Any:
    """The damage cells compute the Kafka side once (the first cell, in Spark, by the real functions) and
    hand each later cell a copy: ~5 s of Spark per cell, and the same frames whatever the damage. Each
    cell still runs the whole ``verify`` against its own damaged sink. Verify's Spark build itself is
    proven by every other test here (``test_verify_passes_and_every_total_equals_kafka`` first)."""
    from unittest import mock

    from rewind.proof import aggregate_proof, contract_proof

    def copied(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
        return {k: v.copy(deep=True) for k, v in tables.items()}

    def once(real: Any, key: Callable[..., tuple[Any, ...]]) -> Any:
        def build(spark: Any, spec: Any, transform: Any, *args: Any, **kwargs: Any) -> dict[str, pd.DataFrame]:
            k = (spec.name, type(transform).__qualname__, *key(*args, **kwargs))
            if k not in _KAFKA_SIDE:
                _KAFKA_SIDE[k] = copied(real(spark, spec, transform, *args, **kwargs))
            return copied(_KAFKA_SIDE[k])
        return build

    def batch_key(_bootstrap: str, ranges: Any, *, earliest: Any = None, exclude: Any = (), kinds: Any = None,
                  description: str = "") -> tuple[Any, ...]:
        return ("batch", tuple(sorted(ranges.items())), tuple(sorted(earliest.items())) if earliest else None,
                frozenset(exclude), tuple(kinds) if kinds is not None else None)

    def records_key(records: Any, *, kinds: Any = None, description: str = "") -> tuple[Any, ...]:
        return ("records", tuple((r.topic, r.partition, r.offset, r.value) for r in records),
                tuple(kinds) if kinds is not None else None)

    with mock.patch.object(contract_proof, "build_batch", once(contract_proof.build_batch, batch_key)), \
            mock.patch.object(aggregate_proof, "build_batch", once(aggregate_proof.build_batch, batch_key)), \
            mock.patch.object(contract_proof, "build_records", once(contract_proof.build_records, records_key)):
        yield


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_to_any_row_fails_verify(run: dict[str, Any], damage: str, kafka_side_built_once: None) -> None:
    sql, problem, names = DAMAGE[damage]
    _damaged_copy(run, sql)
    code, out, _ = cli("verify", "pay_copy", "--all", "--json", "--registry", run["reg"], "--bootstrap",
                       run["bootstrap"])
    report = json.loads(out)
    assert code == 4 and report[problem]["count"] >= 1, (damage, report)
    if names:
        assert names in json.dumps(report[problem]["examples"]), report[problem]


def test_a_total_off_by_one_fails_the_dq_proof(run: dict[str, Any], tmp_path: Path) -> None:
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof
    from rewind.registry import load_registry

    _damaged_copy(run, DAMAGE["a total off by one"][0])
    result = run_proof(load_registry(run["reg"]).get("pay_copy"), run["bootstrap"], run_dir=tmp_path / "dq")
    text = format_proof(result)
    assert not result.ok and {f.name for f in result.failures} == {"aggregates_reconcile"}, text
    assert "merchant_totals [" in text and "total: sink" in text


def test_the_same_report_with_and_without_expect(run: dict[str, Any]) -> None:
    """Kafka records are Kafka records: without expect() (build as a bounded batch, then again over the
    records its deduplication dropped) the report counts and classes every record as expect() does,
    and its classes add up to the range."""
    got = {}
    for name in ("pay", "pay_expect"):
        code, out, err = cli("verify", name, "--json", "--registry", run["reg"], "--bootstrap", run["bootstrap"])
        assert code == 0, out
        got[name] = {k: v for k, v in json.loads(out).items() if k not in ("stream", "notes")}
        assert ("no expect()" in err) == (name == "pay"), err
    assert got["pay"] == got["pay_expect"], {k: (got["pay"].get(k), got["pay_expect"].get(k))
                                             for k in set(got["pay"]) | set(got["pay_expect"])
                                             if got["pay"].get(k) != got["pay_expect"].get(k)}
    report = got["pay"]
    kafka = sum(int(o) for parts in report["range"].values() for _, o in parts.values())
    classes = {k: v for k, v in report.items() if k.startswith("landed_") and isinstance(v, int)}
    assert report["records_in_range"] == kafka == sum(classes.values()), (kafka, classes)
    # the classes from an oracle of this test's own: json over a plain consumer's records, and the sink's
    # late dead letters (every 37th payment was sent twice; a copy the stream routed late is late, not a re-send)
    from rewind.proof.verify import read_records

    with sqlite3.connect(db(run["spec"])) as conn:
        late = set(conn.execute("SELECT topic, partition, \"offset\" FROM pay_dead_letter "
                                "WHERE reason = 'behind_watermark'").fetchall())
    copies: dict[str, int] = {}
    malformed = 0
    for r in read_records(run["bootstrap"], [run["topic"]]):
        try:
            pid = json.loads(r.value or b"")["payment_id"]
        except ValueError:
            malformed += 1
            continue
        if (r.topic, r.partition, r.offset) not in late:
            copies[pid] = copies.get(pid, 0) + 1
    assert classes["landed_row"] == len(copies) and classes["landed_dead_letter"] == malformed > 0, classes
    assert classes["landed_duplicate_send"] == sum(n - 1 for n in copies.values()) > 0, classes
    assert classes["landed_behind_watermark"] == len(late) >= LATE, classes
    assert report["dead_letters_by_reason"] == {"malformed": malformed}


def test_a_total_above_a_million_off_by_one_fails_verify_the_dq_proof_and_a_replays_proof(
        run: dict[str, Any], tmp_path: Path) -> None:
    """30,190,708 -> 30,190,709 passed the old proof (float64 within 1e-6). Totals here are billions of
    micro-dollars (a bigint); one of them is changed by 1."""
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof
    from rewind.registry import load_registry

    with sqlite3.connect(db(run["spec"])) as conn:
        start, merchant, micros = conn.execute(
            "SELECT window_start, merchant, total_micros FROM pay_merchant_totals WHERE total_micros > 1000000 "
            "ORDER BY window_start LIMIT 1").fetchone()
    assert micros > 10 ** 6
    shutil.copy(db(run["spec"]), run["work"] / "copy.db")  # pay_copy's sink, keys and all (a replay writes it)
    with sqlite3.connect(run["work"] / "copy.db") as conn:
        conn.execute("UPDATE pay_merchant_totals SET total_micros = total_micros + 1 WHERE window_start = ? AND "
                     "merchant = ?", (start, merchant))
    said = f"total_micros: sink {micros + 1}, recomputed {micros}"
    code, out, _ = cli("verify", "pay_copy", "--json", "--registry", run["reg"], "--bootstrap", run["bootstrap"])
    report = json.loads(out)
    assert code == 4 and report["aggregates_mismatch"]["count"] == 1, report
    assert said in report["aggregates_mismatch"]["examples"][0]["disagrees"] and merchant in out
    spec = load_registry(run["reg"]).get("pay_copy")
    result = run_proof(spec, run["bootstrap"], run_dir=tmp_path / "dq")
    assert not result.ok and said in format_proof(result), format_proof(result)
    # a replay's proof: the DQ proof over the replayed range (here every partition from the start)
    parts = {str(p): [0, e] for (t, p), e in _ends(run).items()}
    replayed = run_proof(spec, run["bootstrap"], bounds={run["topic"]: parts}, run_dir=tmp_path / "replay-proof")
    assert not replayed.ok and said in format_proof(replayed), format_proof(replayed)
    # and the replay itself rewrites the total whole, then its proof passes
    code, out, _ = cli("replay", "run", "pay_copy", "--from", "earliest", "--to", "latest", "--registry", run["reg"],
                       "--bootstrap", run["bootstrap"], "--no-s3", "--json", "--no-progress")
    fixed = json.loads(out)
    assert code == 0 and fixed["proof"]["ok"], out
    assert fixed["aggregates"]["merchant_totals"]["rewritten"] == 1, fixed["aggregates"]
    with sqlite3.connect(run["work"] / "copy.db") as conn:
        assert conn.execute("SELECT total_micros FROM pay_merchant_totals WHERE window_start = ? AND merchant = ?",
                            (start, merchant)).fetchone()[0] == micros


def _ends(run: dict[str, Any]) -> dict[tuple[str, int], int]:
    from rewind.kafka.lookups import true_end_offsets

    return {(tp.topic, int(tp.partition)): int(e) for tp, e in true_end_offsets(run["bootstrap"], run["topic"]).items()}


def test_a_replace_table_not_declared_an_aggregate_is_refused(run: dict[str, Any]) -> None:
    before = totals(run["spec"])
    code, out, err = cli("replay", "run", "pay_undeclared", "--from", "earliest", "--to", "latest", "--partitions",
                         str(REPLAYED), "--registry", run["reg"], "--bootstrap", run["bootstrap"], "--no-s3")
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert "'merchant_totals' is on_conflict 'replace' but not declared an aggregate" in err
    pd.testing.assert_frame_equal(totals(run["spec"]), before)


def test_late_records_come_back_once(run: dict[str, Any]) -> None:
    spec, bootstrap = run["spec"], run["bootstrap"]
    code, out, _ = cli("replay", "run", "pay", "--from", "earliest", "--to", "latest", "--reprocess-late",
                       "--registry", run["reg"], "--bootstrap", bootstrap, "--no-s3", "--json", "--no-progress")
    report = json.loads(out)
    assert code == 0, out
    c = report["counts"]
    # every late record's dead letter retired; a late re-send of one payment is one row (its copies collapse)
    assert c["late_dead_letters_retired"] == run["late"] and 0 < c["late"] == c["late_reprocessed"] <= run["late"], c
    assert report["aggregates"]["merchant_totals"]["written"] >= 1 and report["proof"]["ok"], report["proof"]["text"]
    with sqlite3.connect(db(spec)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM pay_dead_letter WHERE reason = 'behind_watermark'").fetchone()[0] == 0
        ids = {r[0] for r in conn.execute("SELECT payment_id FROM pay_payments")}
    assert {f"pay-{N + j}" for j in range(LATE)} <= ids
    assert_totals_equal_kafka(spec, bootstrap, with_late=True)
    code, out, _ = cli("verify", "pay", "--all", "--json", "--registry", run["reg"], "--bootstrap", bootstrap)
    assert code == 0, out


def test_a_record_resent_into_a_kafka_sink_topic_fails_verify(run: dict[str, Any], spark: Any, tmp_path: Path) -> None:
    """The same stream into Kafka topics: verify passes, then one committed record of the payments topic
    sent again (a second copy of a key an insert-once table holds once) fails it. Its ledger topic is
    compacted and kept forever (it decides which re-run batches are skipped)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    from rewind.driver.runner import build_query, open_sink
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    bootstrap, topic = run["bootstrap"], run["topic"]
    reg = write_registry(tmp_path / "k.yaml", demo_stream("payk", topic, tmp_path, max_offsets=1500,
                                                          sink_url=f"kafka://{bootstrap}/{topic}-out.", **WINDOW_KEYS))
    spec = load_registry(reg).get("payk")
    query = build_query(spark, spec, bootstrap, available_now=True)
    assert query.awaitTermination(300), "the available_now run did not finish"
    code, out, _ = cli("verify", "payk", "--all", "--json", "--registry", str(reg), "--bootstrap", bootstrap)
    assert code == 0, out
    with open_sink(spec) as sink:
        rows_topic, ledger = sink.table_name("payments"), sink.table_name("rewind_batches")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, ledger)]).values())
                     ).result(30)
    assert described["cleanup.policy"].value == "compact" and described["retention.ms"].value == "-1"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"resend-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([rows_topic])
    msg = None
    deadline = time.monotonic() + 60
    while msg is None or msg.error() is not None:
        assert time.monotonic() < deadline, "no record in the payments topic"
        msg = consumer.poll(1.0)
    consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(rows_topic, key=msg.key(), value=msg.value(), partition=msg.partition())
    assert producer.flush(30) == 0
    code, out, _ = cli("verify", "payk", "--all", "--json", "--registry", str(reg), "--bootstrap", bootstrap)
    report = json.loads(out)
    assert code == 4 and report["rows_duplicate_key"]["count"] == 2, report
