"""The mutation matrix of the proofs: a correct sink, damaged one way at a time, must fail every proof.

Issue "A proof no damage passes". For each table kind (insert-once ``payments``, the aggregate
``account_totals`` with ``replace``, the ``latest`` table ``balances``, ``dead_letter``) and each sink
(SQLite, PostgreSQL, Kafka topics, Delta tables) a cell writes the correct rows of one Kafka topic
into a fresh sink, damages them through the storage itself (SQL UPDATE/INSERT/DELETE with
SQLAlchemy; a foreign transactional producer's records and tombstones in the sink's topics; delta-rs
``update``/``delete``/append), and requires ``rewind verify`` to exit 4 AND the DQ proof to fail,
both naming the table, the key, the column and both values where a column is involved. The
undamaged sink, and a double within its tolerance, must pass both. ``docs/testing.md`` ("The
mutation matrix") has the table of every cell.

How it stays fast: the stream (``tests/streams/ledger_stream.py``) has ``expect()`` and aggregate
``measures``, so no proof in a cell needs Spark; the records are produced once per module; a sink's
correct rows are computed here in pandas from ``expect()`` and written with ``Sink.write_batch(0,
...)``; a minimal real checkpoint (``offsets/0`` and ``commits/0`` in Spark's format) gives
``committed_position`` batch 0, its end offsets and its watermark. The ``matrix`` fixture runs the
selected cells in ``WORKERS`` threads (a cell mostly waits: Kafka fetches and metadata, a
database, a Delta commit) and each parametrised case asserts its own cell's outcome.

The DQ side. ``run_proof`` (``rewind.proof.dq``) is ``_contract_frames`` (the cursor's span, then
``contract_proof.contract_frames``) followed by ``gx.validate_frames`` with the contract suite and
Data Docs. Each damage kind runs the real ``run_proof`` in at least one cell, on SQLite (a record
sent twice: on Kafka), and so do both undamaged SQLite cells (``real_dq``: each magnitude of the
integer +1 once, on three table kinds; the three time columns are one kind, the two null swaps
another). Every other cell keeps the frames its ``rewind verify`` built (``FramesKept``) and
validates them with ``validate_frames(..., docs_dir=None)`` and the same suite. They are the frames
``run_proof`` builds here: both prove the committed range (``run_proof`` from its cursor, which
starts at the topic's first offset in a fresh checkpoint, up to the committed end; ``verify`` from 0
to the committed end) with the committed batch and its watermark, and every real cell checks that
the two are equal. The only step left out is rendering Data Docs, which judges nothing; what
differs between sinks (how rows are read back) is inside those frames, so it is proven on every
sink. The four end-to-end cases (the real stream's ``build`` in Spark into each sink, then
``verify`` and the real ``run_proof`` before and after one damage) close the loop.
"""

from __future__ import annotations

import contextlib
import decimal
import io
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rewind.api.contract import Identity

ROOT = Path(__file__).resolve().parents[1]
STREAMS = ROOT / "tests" / "streams"
if str(STREAMS) not in sys.path:
    sys.path.insert(0, str(STREAMS))

import ledger_stream as ls  # noqa: E402

PARTITIONS, N = 4, 240
WINDOW, DELAY = timedelta(minutes=1), timedelta(seconds=30)
BASE = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ENTRY_KEYS = {"window": "1 minute", "watermark_delay": "30 seconds", "dq_suite": "contract"}
TRANSFORMS = {"payments": "ledger_stream:PaymentsLedger", "balances": "ledger_stream:BalancesLedger"}
SPECS = {"payments": ls.PAYMENTS, "balances": ls.BALANCES, "account_totals": ls.TOTALS, "dead_letter": ls.DEAD_LETTER}
MAGNITUDES = {"1": 1, "10^6": 10**6, "10^12": 10**12, "2^53+1": 2**53 + 1}
PREFIX = "m_"


# --------------------------------------------------------------------------- the holes, each in a few lines
# The matrix found these; each was fixed in rewind/proof/ and is reproduced here without Kafka or Spark.
def _two_versions() -> pd.DataFrame:
    """expect()'s frame of two records of account a1 (seq 1 and 2) in one window, at their coordinates."""
    records = [ls.ledger_record(i, BASE) for i in (1, 6)]
    frame = pd.DataFrame({"topic": "t", "partition": 0, "offset": [0, 1], "timestamp": 0, "key": None,
                          "value": [json.dumps(r).encode() for r in records]})
    return pd.concat([frame[["topic", "partition", "offset"]], ls.expect_frame(frame)], axis=1)


def _aggregates_of(tmp_path: Path, rows: list[dict[str, Any]], transform: Any, expected: pd.DataFrame,
                   **kw: Any) -> pd.DataFrame:
    """``prove_aggregates`` (the measures path) over a SQLite sink holding ``rows`` of ``account_totals``."""
    from rewind.proof.aggregate_proof import prove_aggregates
    from rewind.sink.sql import ExactlyOnceSqlSink

    spec = SimpleNamespace(name="repro", durations=lambda: {"window": WINDOW, "watermark_delay": DELAY})
    with ExactlyOnceSqlSink(f"sqlite:///{tmp_path}/s.db", "repro", transform.tables) as sink:
        sink.write_rows({"account_totals": rows})
        return prove_aggregates(spec, transform, "unused:9092", sink, expected=expected, last_batch=0,
                                watermark=BASE + timedelta(hours=1), **kw).frame


def _group(expected: pd.DataFrame, **changes: Any) -> dict[str, Any]:
    start = pd.Timestamp(expected["event_time"].min()).floor("min")
    valid = expected[expected["reason"].isna()]
    return {"window_start": start, "window_end": start + WINDOW, "account": "a1", "payments": len(valid),
            "cents_total": int(valid["cents"].sum()), "fee_total": sum(valid["fee"]), "rate_sum": valid["rate"].sum(),
            "batch_id": 0, **changes}


def test_hole_a_latest_identity_counted_one_record_per_entity(tmp_path: Path) -> None:
    """A ``latest`` stream's aggregate was recomputed from one record per entity (its identity, not its
    identity and version): every total of an entity with two records failed on a correct sink."""
    exp = _two_versions()
    frame = _aggregates_of(tmp_path, [_group(exp)], ls.BalancesLedger(), exp, span=None)
    assert frame["aggregate_state"].tolist() == ["match"], frame[["sink", "recomputed"]].to_dict("records")


def test_hole_a_group_no_record_makes_was_never_judged(tmp_path: Path) -> None:
    """A proof of a span (``verify`` always proves one: below the committed end) judged only the groups
    its records make, so a row of a group no record makes passed; a span holding every record its
    partitions ever had judges every group."""
    exp = _two_versions()
    ghost = _group(exp, account="a9")
    frame = _aggregates_of(tmp_path, [_group(exp), ghost], ls.PaymentsLedger(), exp,
                           span={("t", 0): (0, 2)}, judged=np.ones(len(exp), dtype=bool))
    assert sorted(frame["aggregate_state"]) == ["match", "unexpected"], frame
    # once retention deleted records (the partition's first offset read is 5), a group of none read
    # may be one of theirs: only the span's groups are judged, as before
    kept = exp.assign(offset=exp["offset"] + 5)
    frame = _aggregates_of(tmp_path / "retention", [_group(kept), ghost], ls.PaymentsLedger(), kept,
                           span={("t", 0): (0, 7)}, judged=np.ones(len(kept), dtype=bool))
    assert frame["aggregate_state"].tolist() == ["match"], frame


def test_hole_a_window_end_was_never_compared() -> None:
    """``window_end`` is left out of the value columns (it derives from the start), so any value passed."""
    from rewind.proof.aggregates import judge_groups, recompute_measures

    exp = _two_versions()
    recomputed = recompute_measures(exp, ls.TOTALS_AGGREGATE, WINDOW)
    moved = pd.DataFrame([_group(exp, window_end=_group(exp)["window_end"] + pd.Timedelta(microseconds=1))])
    frame = judge_groups(moved, recomputed, ls.TOTALS_AGGREGATE, values=["payments"], size=WINDOW, closed_until=None)
    assert frame["aggregate_state"].tolist() == ["mismatch"]
    assert "window_end: sink '2026-05-01T12:01:00.000001+00:00', recomputed '2026-05-01T12:01:00+00:00'" \
        in frame["disagrees"].iloc[0]


def test_hole_a_row_past_the_committed_end_was_never_judged() -> None:
    """A proof of a span judged only the rows at its coordinates: a row that batch 0 wrote at an offset past
    what batch 0 read (so no record makes it) passed; a later batch's row there and a replay's stay unjudged."""
    from rewind.proof.contract_frames import build_contract_frames

    exp = _two_versions()
    rows = exp[["id", "topic", "partition", "offset"]].assign(batch_id=0)
    ghost = {"id": "p-ghost", "topic": "t", "partition": 0, "offset": 7, "batch_id": 0}
    later, replayed = {**ghost, "id": "p-later", "batch_id": 1}, {**ghost, "id": "p-replay", "batch_id": None}
    sink = {"payments": pd.concat([rows, pd.DataFrame([ghost, later, replayed])], ignore_index=True),
            "dead_letter": pd.DataFrame(columns=["topic", "partition", "offset", "reason"])}
    frames = build_contract_frames(exp, sink, identity=Identity("payments", ("id",)), keys={"payments": ("id",)},
                                   dead_letter_table="dead_letter", row_scope={("t", 0): (0, 2)}, last_batch=0)
    checks = dict(zip(frames.rows["identity"], frames.rows["row_check"]))
    assert checks == {"p-00001": "ok", "p-00006": "ok", "p-ghost": "unexpected"}, checks


# --------------------------------------------------------------------------- the records, once per module
def corpus_values() -> list[tuple[int, bytes | None]]:
    """(partition, value) of every record: N valid ones, re-sends on another partition, malformed ones
    of five shapes (not JSON, fields missing, a fee with three places, a time without a zone, no
    value at all) and two with negative cents: 265 records."""
    def malformed(i: int) -> bytes | None:
        doc = ls.ledger_record(i, BASE)
        shapes = [b"{not json", json.dumps({"id": f"p-m{i}"}).encode(),
                  json.dumps({**doc, "id": f"p-m{i}", "fee": "1.234"}).encode(),
                  json.dumps({**doc, "id": f"p-m{i}", "ts": doc["ts"][:-6]}).encode(), None]
        return shapes[(i // 29) % len(shapes)]

    out: list[tuple[int, bytes | None]] = []
    for i in range(N):
        out.append((i % PARTITIONS, json.dumps(ls.ledger_record(i, BASE)).encode()))
        if i % 17 == 3:
            out.append(((i + 1) % PARTITIONS, out[-1][1]))  # a re-send: one payment, two records
        if i % 29 == 7:
            out.append((i % PARTITIONS, malformed(i)))
        if i % 97 == 50:
            out.append((i % PARTITIONS, json.dumps({**ls.ledger_record(i, BASE), "id": f"p-n{i}",
                                                    "cents": -5}).encode()))
    return out


@dataclass
class Corpus:
    bootstrap: str
    topic: str
    records: pd.DataFrame      # records_frame: topic, partition, offset, timestamp, key, value
    expected: pd.DataFrame     # expect()'s frame joined to the coordinates (expected_frame)
    ends: dict[tuple[str, int], int]
    watermark: datetime        # what offsets/0 records: the latest event time less the delay
    rows: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)  # stream -> table -> correct rows


@pytest.fixture(scope="module")
def corpus(platform: Any) -> Corpus:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from rewind.proof.contract_proof import expected_frame
    from rewind.proof.verify import read_records, records_frame

    bootstrap = platform.kafka_bootstrap
    topic = f"ledger-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        fut.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value in corpus_values():
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0
    records = records_frame(read_records(bootstrap, [topic]))
    expected = expected_frame(ls.PaymentsLedger(), records, SimpleNamespace(name="matrix"))
    ends = {(topic, int(p)): int(o) + 1 for p, o in records.groupby("partition")["offset"].max().items()}
    watermark = (expected["event_time"].max() - DELAY).floor("ms").to_pydatetime()
    c = Corpus(bootstrap, topic, records, expected, ends, watermark)
    c.rows = {stream: correct_rows(c, stream) for stream in TRANSFORMS}
    return c


def correct_rows(c: Corpus, stream: str) -> dict[str, pd.DataFrame]:
    """The rows a correct sink holds after batch 0, from ``expect()`` in pandas: one payment per id (its
    first record) or each account's newest record, every group the watermark has closed, every
    refused record as a dead letter."""
    from rewind.proof.aggregates import recompute_measures

    exp = c.expected.assign(kafka_timestamp=pd.to_datetime(c.records["timestamp"].astype("int64"), unit="ms",
                                                           utc=True).to_numpy(),
                            raw_value=[None if v is None else v.decode() for v in c.records["value"]])
    valid = exp[exp["reason"].isna()]
    distinct = valid.drop_duplicates("id")
    if stream == "payments":
        ident = distinct
    else:
        ident = valid.sort_values("seq", kind="stable").drop_duplicates("account", keep="last")
    spec = SPECS[stream]
    rows = ident[[n for n in spec.column_names if n != "batch_id"]].assign(batch_id=0)
    totals = recompute_measures(distinct, ls.TOTALS_AGGREGATE, WINDOW)
    totals["window_end"] = totals["window_start"] + WINDOW
    totals = totals[totals["window_end"] <= pd.Timestamp(c.watermark)].assign(batch_id=0)
    dead = exp[exp["reason"].notna()][["topic", "partition", "offset", "kafka_timestamp", "reason", "raw_value"]]
    dead = dead.assign(watermark=None, batch_id=0)
    return {stream: rows.reset_index(drop=True), "account_totals": totals.reset_index(drop=True),
            "dead_letter": dead.reset_index(drop=True)}


# --------------------------------------------------------------------------- a fresh sink per cell
class Target:
    """One sink kind: a fresh sink's registry value, and damage through its storage."""

    name = ""

    def __init__(self, corpus: Corpus, rows: dict[str, pd.DataFrame], pg_server: str | None = None) -> None:
        self.corpus, self.rows, self.pg_server = corpus, rows, pg_server

    def sink_entry(self, home: Path, stream: str) -> str:
        raise NotImplementedError

    def update(self, table: str, key: dict[str, Any], changes: dict[str, Any]) -> None:
        raise NotImplementedError

    def delete(self, table: str, key: dict[str, Any]) -> None:
        raise NotImplementedError

    def insert(self, table: str, row: dict[str, Any]) -> None:
        raise NotImplementedError

    def resend(self, table: str, key: dict[str, Any]) -> None:
        raise NotImplementedError(f"{self.name}: only a Kafka sink's records can be sent twice")

    def close(self) -> None:
        pass


class SqlTarget(Target):
    def sink_entry(self, home: Path, stream: str) -> str:
        self.url = self.database(home)
        return f'{{url: "{self.url}", table_prefix: {PREFIX}}}'

    def database(self, home: Path) -> str:
        return f"sqlite:///{home}/sink.db"

    def _table(self, name: str) -> Any:
        import sqlalchemy as sa

        from rewind.sink.dialects import spec_table

        return spec_table(SPECS[name], sa.MetaData(), PREFIX)

    def _run(self, stmt: Any) -> int:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as conn:
                return int(conn.execute(stmt).rowcount)
        finally:
            engine.dispose()

    def _where(self, t: Any, key: dict[str, Any]) -> Any:
        import sqlalchemy as sa

        return sa.and_(*[t.c[k] == _py(v) for k, v in key.items()])

    def update(self, table: str, key: dict[str, Any], changes: dict[str, Any]) -> None:
        import sqlalchemy as sa

        t = self._table(table)
        assert self._run(sa.update(t).where(self._where(t, key)).values(
            **{k: _py(v) for k, v in changes.items()})) == 1, (table, key)

    def delete(self, table: str, key: dict[str, Any]) -> None:
        import sqlalchemy as sa

        t = self._table(table)
        assert self._run(sa.delete(t).where(self._where(t, key))) == 1, (table, key)

    def insert(self, table: str, row: dict[str, Any]) -> None:
        import sqlalchemy as sa

        t = self._table(table)
        self._run(sa.insert(t).values(**{k: _py(v) for k, v in row.items()}))


class SqliteTarget(SqlTarget):
    name = "sqlite"


class PostgresTarget(SqlTarget):
    name = "postgres"

    def database(self, home: Path) -> str:
        from tests.harness.pg_databases import create_database

        server = self.pg_server
        assert server is not None
        name = f"m_{uuid.uuid4().hex[:12]}"
        self.server, self.db = server, name
        return create_database(server, name)

    def close(self) -> None:
        from tests.harness.pg_databases import drop_database

        if getattr(self, "db", None):
            drop_database(self.server, self.db)


class KafkaTarget(Target):
    """Damage as a foreign transactional producer would: records and tombstones (a key with no value)
    in the sink's topics, in the sink's own JSON format (``rewind.sink.kafka_codec``)."""

    name = "kafka"

    def sink_entry(self, home: Path, stream: str) -> str:
        self.prefix = f"mx{uuid.uuid4().hex[:8]}."
        return (f'{{url: "kafka://{self.corpus.bootstrap}/{self.prefix}", table_prefix: {PREFIX}, '
                f'options: {{topic.partitions: "1"}}}}')

    def topic(self, table: str) -> str:
        return f"{self.prefix}{PREFIX}{table}"

    def _encoded(self, table: str, row: dict[str, Any]) -> tuple[bytes, bytes]:
        from rewind.sink.convert import prepare_table
        from rewind.sink.kafka_codec import encode_table

        full = {c: row.get(c) for c in SPECS[table].column_names}
        return next(encode_table(prepare_table(SPECS[table], [full], sqlite_text=False)))

    def _key(self, table: str, key: dict[str, Any]) -> bytes:
        return self._encoded(table, self._row_of(table, key))[0]

    def _send(self, records: list[tuple[str, bytes, bytes | None, Any]]) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.corpus.bootstrap, "transactional.id": f"foreign-{uuid.uuid4().hex}"})
        p.init_transactions(30)
        p.begin_transaction()
        for topic, key, value, headers in records:
            p.produce(topic, key=key, value=value, partition=0, headers=headers)
        p.commit_transaction(30)

    def _row_of(self, table: str, key: dict[str, Any]) -> dict[str, Any]:
        return _find(self.rows, table, key)

    def update(self, table: str, key: dict[str, Any], changes: dict[str, Any]) -> None:
        k = self._key(table, key)
        new_key, value = self._encoded(table, {**self._row_of(table, key), **changes})
        self._send([(self.topic(table), k, None, None), (self.topic(table), new_key, value, None)])

    def delete(self, table: str, key: dict[str, Any]) -> None:
        self._send([(self.topic(table), self._key(table, key), None, None)])

    def insert(self, table: str, row: dict[str, Any]) -> None:
        k, value = self._encoded(table, row)
        self._send([(self.topic(table), k, value, None)])

    def resend(self, table: str, key: dict[str, Any]) -> None:
        """The committed record of ``key`` sent again, byte for byte (key, value, headers)."""
        from confluent_kafka import Consumer, TopicPartition

        want = self._key(table, key)
        consumer = Consumer({"bootstrap.servers": self.corpus.bootstrap, "group.id": f"m-{uuid.uuid4().hex[:6]}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(self.topic(table), 0, 0)])
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, f"no record of {key} in {self.topic(table)}"
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None and msg.key() == want and msg.value() is not None:
                    break
        finally:
            consumer.close()
        self._send([(self.topic(table), msg.key(), msg.value(), msg.headers())])


class DeltaTarget(Target):
    """Damage with delta-rs: ``update`` and ``delete`` by predicate, ``write_deltalake`` appends."""

    name = "delta"

    def sink_entry(self, home: Path, stream: str) -> str:
        self.lake = home / "lake"
        return f'{{url: "delta://{self.lake}", table_prefix: {PREFIX}}}'

    def path(self, table: str) -> str:
        return str(self.lake / f"{PREFIX}{table}")

    def _predicate(self, table: str, key: dict[str, Any]) -> str:
        types = {c.name: c.type for c in SPECS[table].columns}
        return " AND ".join(f"`{k}` = " + (f"'{pd.Timestamp(_py(v)).isoformat()}'" if types[k] == "timestamp" else
                                           _sql(v, types[k])) for k, v in key.items())

    def update(self, table: str, key: dict[str, Any], changes: dict[str, Any]) -> None:
        from deltalake import DeltaTable

        types = {c.name: c.type for c in SPECS[table].columns}
        done = DeltaTable(self.path(table)).update(predicate=self._predicate(table, key),
                                                   updates={k: _sql(v, types[k]) for k, v in changes.items()})
        assert done["num_updated_rows"] == 1, (table, key, done)

    def delete(self, table: str, key: dict[str, Any]) -> None:
        from deltalake import DeltaTable

        done = DeltaTable(self.path(table)).delete(self._predicate(table, key))
        assert done["num_deleted_rows"] == 1, (table, key, done)

    def insert(self, table: str, row: dict[str, Any]) -> None:
        import pyarrow as pa
        from deltalake import write_deltalake

        from rewind.sink.delta_tables import arrow_schema

        spec = SPECS[table]
        data = pa.Table.from_pylist([{c: _py(row.get(c)) for c in spec.column_names}], schema=arrow_schema(spec))
        write_deltalake(self.path(table), data, mode="append")


TARGETS: dict[str, type[Target]] = {t.name: t for t in (SqliteTarget, PostgresTarget, KafkaTarget, DeltaTarget)}


def _py(v: Any) -> Any:
    """A frame's value as the plain Python value a driver takes (None for nulls, aware datetimes)."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, pd.Timestamp):
        return v.tz_convert("UTC").to_pydatetime() if v.tzinfo else v.tz_localize("UTC").to_pydatetime()
    if hasattr(v, "item") and not isinstance(v, (str, bytes, decimal.Decimal)):
        return v.item()
    return v


def _sql(v: Any, kind: str) -> str:
    """A value as a delta-rs (DataFusion) SQL literal of the column's type."""
    from rewind.api.tables import decimal_of

    v = _py(v)
    if v is None:
        return "NULL"
    if kind == "timestamp":
        return f"CAST('{pd.Timestamp(v).tz_convert('UTC').isoformat()}' AS TIMESTAMP)"
    if decimal_of(kind):
        return f"CAST('{v}' AS DECIMAL({','.join(map(str, decimal_of(kind) or ()))}))"
    if kind == "double":
        return repr(float(v))
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(int(v))


def _find(rows: dict[str, pd.DataFrame], table: str, key: dict[str, Any]) -> dict[str, Any]:
    frame = rows[table]
    mask = pd.Series(True, index=frame.index)
    for k, v in key.items():
        mask &= frame[k].map(lambda x, v=v: _py(x) == _py(v)).astype(bool)
    hit = frame[mask]
    assert len(hit) == 1, (table, key, len(hit))
    return {k: _py(v) for k, v in hit.iloc[0].to_dict().items()}


# --------------------------------------------------------------------------- the damages
@dataclass(frozen=True)
class Expect:
    """What both proofs must say of a damaged sink: the problems ``verify`` counts (its JSON), the checks
    the DQ proof fails, and words their examples hold (table, key, column, both values). None: pass."""

    problems: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()


PASSES = Expect()
#: A group's key changed (its window's start, its account): a row of a group no record makes, and the
#: closed group it was, missing.
MOVED_GROUP = (("aggregates_unexpected", "aggregates_missing"), ("aggregates_reconcile", "closed_aggregates_present"))
VALUE = {"rows": (("rows_value_mismatch",), ("rows_match_kafka",)),
         "aggregates": (("aggregates_mismatch",), ("aggregates_reconcile",))}


def token(v: Any) -> str:
    """How a value shows in a proof's message (``rewind.proof.values.shown``), loosely: a decimal without
    its trailing zeros (the sink's scale and the recomputation's may differ), a text quoted."""
    v = _py(v)
    if v is None:
        return "None"
    if isinstance(v, decimal.Decimal):
        text = format(v, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    if isinstance(v, datetime):
        return pd.Timestamp(v).isoformat()
    if isinstance(v, str):
        return repr(v)
    return repr(v) if isinstance(v, float) else str(v)


@dataclass
class Cell:
    """One cell's sink, its correct rows, and the damage it applies (through ``target``)."""

    corpus: Corpus
    target: Target
    stream: str
    kind: str
    rows: dict[str, pd.DataFrame]

    @property
    def table(self) -> str:
        return self.kind

    def frame(self) -> pd.DataFrame:
        return self.rows[self.table]

    def key_of(self, row: dict[str, Any] | pd.Series) -> dict[str, Any]:
        return {k: _py(row[k]) for k in SPECS[self.table].key}

    def where(self, label: str) -> str:
        """How a proof names the row or group (``table [key]``)."""
        return f"{self.table} [{label}]"

    def label(self, row: dict[str, Any] | pd.Series) -> str:
        if self.table == "account_totals":
            return f"{pd.Timestamp(row['window_start']).isoformat()}, {row['account']}"
        return str(row["id"] if self.table == "payments" else row["account"])

    def change(self, row: pd.Series, column: str, new: Any) -> Expect:
        """Set one column of one row to ``new``: a value mismatch naming the table, key, column and both values."""
        self.target.update(self.table, self.key_of(row), {column: new})
        problems, checks = VALUE["aggregates" if self.table == "account_totals" else "rows"]
        words = (self.where(self.label(row)), f"{column}: sink", token(new), token(row[column]))
        return Expect(problems, checks, words)

    def nth(self, n: int) -> pd.Series:
        """The ``n``-th row of the table (modulo its length: a latest table holds one row per account)."""
        return self.frame().iloc[n % len(self.frame())]

    def pick(self, **conditions: Any) -> pd.Series:
        frame = self.frame()
        mask = pd.Series(True, index=frame.index)
        for column, test in conditions.items():
            mask &= frame[column].map(test).astype(bool)
        assert mask.any(), (self.table, conditions)
        return frame[mask].iloc[0]


def _account(magnitude: int) -> str:
    return f"a{list(MAGNITUDES.values()).index(magnitude)}"


def bigint_plus_one(name: str) -> Callable[[Cell], Expect]:
    magnitude = MAGNITUDES[name]

    def damage(cell: Cell) -> Expect:
        if cell.table == "payments":
            row = cell.pick(cents=lambda v: v == magnitude)
            column = "cents"
        elif cell.table == "balances":
            row = cell.pick(account=lambda a: a == _account(magnitude))
            column = "cents"
        else:  # the group of the magnitude's account whose total is at least the magnitude (1: exactly 1)
            column = "cents_total"
            row = cell.pick(account=lambda a: a == _account(magnitude),
                            cents_total=lambda v: v == 1 if magnitude == 1 else v >= magnitude)
        assert magnitude <= int(row[column]) < 10 * magnitude or magnitude > 2**53, (row[column], magnitude)
        return cell.change(row, column, int(row[column]) + 1)

    return damage


def decimal_last_digit(cell: Cell) -> Expect:
    column, unit = ("fee_total", decimal.Decimal("1E-10")) if cell.table == "account_totals" else \
        ("fee", decimal.Decimal("0.01"))
    row = cell.pick(**{column: lambda v: v > 0})
    return cell.change(row, column, decimal.Decimal(row[column]) + unit)


def double_off(times: float) -> Callable[[Cell], Expect]:
    """A double moved ``times`` its tolerance (relative, floor 1.0): beyond it (>1) or within it (<1)."""
    def damage(cell: Cell) -> Expect:
        column = "rate_sum" if cell.table == "account_totals" else "rate"
        tolerance = ls.RATE_TOLERANCE if column == "rate" else 1e-9  # declared / the proofs' default
        row = cell.pick(**{column: lambda v: v > 1.2})
        old = float(row[column])
        expect = cell.change(row, column, old + times * tolerance * max(1.0, abs(old)))
        return expect if times > 1 else PASSES

    return damage


def time_plus_1us(column: str) -> Callable[[Cell], Expect]:
    def damage(cell: Cell) -> Expect:
        row = cell.nth(len(cell.frame()) // 2)
        new = pd.Timestamp(row[column]) + pd.Timedelta(microseconds=1)
        if column != "window_start":
            return cell.change(row, column, new)
        cell.target.update(cell.table, cell.key_of(row), {column: new})  # the group's key: another group
        return Expect(*MOVED_GROUP, (new.isoformat(), str(row["account"])))

    return damage


def null_to_zero(cell: Cell) -> Expect:
    return cell.change(cell.pick(tip=lambda v: _py(v) is None), "tip", 0)


def zero_to_null(cell: Cell) -> Expect:
    column = "cents_total" if cell.table == "account_totals" else "tip"
    return cell.change(cell.pick(**{column: lambda v: _py(v) == 0}), column, None)


def trailing_space(cell: Cell) -> Expect:
    if cell.table == "dead_letter":
        return reason_changed(cell, lambda r: r + " ")
    if cell.table in ("payments", "balances"):
        return cell.change(cell.nth(3), "note", f"{cell.nth(3)['note']} ")
    row = cell.nth(3)  # the account is part of the group's key: another group
    cell.target.update(cell.table, cell.key_of(row), {"account": f"{row['account']} "})
    return Expect(*MOVED_GROUP, (f"{row['account']} ", pd.Timestamp(row["window_start"]).isoformat()))


def coords_token(row: dict[str, Any] | pd.Series) -> str:
    return f'"offset": {int(row["offset"])}'


def deleted_row(cell: Cell) -> Expect:
    row = cell.nth(5)
    cell.target.delete(cell.table, cell.key_of(row))
    if cell.table == "account_totals":
        return Expect(("aggregates_missing",), ("closed_aggregates_present",),
                      (pd.Timestamp(row["window_start"]).isoformat(), str(row["account"])))
    if cell.table == "dead_letter":
        return Expect(("records_dead_letter_missing",), ("no_kafka_record_missing",), (coords_token(row),))
    return Expect(("records_missing",), ("no_kafka_record_missing",), (f'"{cell.label(row)}"',))


def duplicated_row(cell: Cell) -> Expect:
    row = cell.nth(7)
    cell.target.insert(cell.table, {k: _py(v) for k, v in row.items()})
    if cell.table == "account_totals":
        return Expect(("aggregates_duplicate",), ("no_duplicate_aggregate_rows",), (str(row["account"]),))
    label = coords_token(row) if cell.table == "dead_letter" else f'"{cell.label(row)}"'
    return Expect(("rows_duplicate_key",), ("declared_keys_unique",), (label,))


def no_record_makes(cell: Cell) -> Expect:
    """A row whose key no Kafka record makes: an id, account or group of none, or a dead letter at
    coordinates of none (beyond the committed end of its partition, written by batch 0)."""
    row = {k: _py(v) for k, v in cell.nth(9).items()}
    end = cell.corpus.ends[(row.get("topic") or cell.corpus.topic, int(row.get("partition") or 0))]
    if cell.table == "account_totals":
        ghost = {**row, "account": "a9"}
        problems, checks = ("aggregates_unexpected",), ("aggregates_reconcile",)
        words = ('a9',)
    else:
        ghost = {**row, "offset": end + 7}
        if cell.table == "payments":
            ghost["id"] = "p-ghost"
        elif cell.table == "balances":
            ghost["account"] = "a9"
        problems, checks = ("rows_unexpected",), ("rows_match_kafka",)
        words = (coords_token(ghost),) if cell.table == "dead_letter" else (f'"{cell.label(ghost)}"',)
    cell.target.insert(cell.table, ghost)
    return Expect(problems, checks, words)


def valid_at_own_coordinates(cell: Cell, not_id: str | None = None, partition: int | None = None) -> dict[str, Any]:
    """A payment whose row holds its own coordinates (the record it stands for)."""
    rows = cell.corpus.rows["payments"]["payments"]
    for _, r in rows.iterrows():
        if r["id"] != not_id and (partition is None or int(r["partition"]) == partition):
            return {k: _py(v) for k, v in r.items()}
    raise AssertionError("no payment to point at")


def moved_coordinate(cell: Cell) -> Expect:
    row = cell.nth(11)
    other = valid_at_own_coordinates(cell, not_id=_py(row.get("id")), partition=int(row["partition"]))
    if cell.table != "dead_letter":
        return cell.change(row, "offset", other["offset"])
    cell.target.update(cell.table, cell.key_of(row), {"offset": other["offset"]})
    return Expect(("records_row_and_dead_letter", "records_dead_letter_missing", "rows_unexpected"),
                  ("each_kafka_record_lands_once", "no_kafka_record_missing", "rows_match_kafka"),
                  (coords_token(row), coords_token(other)))


def also_dead_letter(cell: Cell) -> Expect:
    payment = valid_at_own_coordinates(cell)
    dead = {k: _py(v) for k, v in cell.frame().iloc[0].items()}
    cell.target.insert("dead_letter", {**dead, **{c: payment[c] for c in ("topic", "partition", "offset")}})
    return Expect(("records_row_and_dead_letter", "rows_unexpected"),
                  ("each_kafka_record_lands_once", "rows_match_kafka"), (coords_token(payment), f'"{payment["id"]}"'))


def reason_changed(cell: Cell, how: Callable[[str], str] = lambda r: ls.NEGATIVE) -> Expect:
    row = cell.pick(reason=lambda r: r == ls.MALFORMED)
    new = how(row["reason"])
    cell.target.update(cell.table, cell.key_of(row), {"reason": new})
    return Expect(("rows_value_mismatch",), ("rows_match_kafka",),
                  ('"table": "dead_letter"', coords_token(row), "reason: sink", repr(new), repr(row["reason"])))


def sent_twice(cell: Cell) -> Expect:
    row = cell.nth(13)
    cell.target.resend(cell.table, cell.key_of(row))
    label = coords_token(row) if cell.table == "dead_letter" else f'"{cell.label(row)}"'
    return Expect(("rows_duplicate_key",), ("declared_keys_unique",), (label,))


def version_plus_one(cell: Cell) -> Expect:
    row = cell.pick(account=lambda a: a == "a2")
    cell.target.update(cell.table, cell.key_of(row), {"seq": int(row["seq"]) + 1})
    return Expect(("rows_unexpected",), ("rows_match_kafka",), ('"a2"',))


def older_version(cell: Cell) -> Expect:
    """The account's row holds its previous record (what a replay of an older range must never leave)."""
    row = cell.pick(account=lambda a: a == "a1")
    valid = cell.corpus.rows["payments"]["payments"]
    before = valid[(valid["account"] == "a1") & (valid["seq"] < row["seq"])].sort_values("seq").iloc[-1]
    cell.target.update(cell.table, cell.key_of(row), {c: before[c] for c in SPECS["balances"].column_names
                                                      if c not in ("account", "batch_id")})
    return Expect(("records_missing",), ("no_kafka_record_missing",), (f'"seq": {int(row["seq"])}', '"a1"'))


DAMAGES: dict[str, Callable[[Cell], Expect]] = {
    "undamaged": lambda cell: PASSES,
    **{f"bigint+1@{m}": bigint_plus_one(m) for m in MAGNITUDES},
    "decimal-last-digit": decimal_last_digit,
    "double-beyond-tolerance": double_off(10.0),
    "double-within-tolerance": double_off(0.1),
    "time+1us": time_plus_1us("event_time"),
    "window_start+1us": time_plus_1us("window_start"),
    "window_end+1us": time_plus_1us("window_end"),
    "null->0": null_to_zero,
    "0->null": zero_to_null,
    "trailing-space": trailing_space,
    "deleted-row": deleted_row,
    "duplicated-row": duplicated_row,
    "row-no-record-makes": no_record_makes,
    "moved-coordinate": moved_coordinate,
    "also-dead-letter": also_dead_letter,
    "reason-changed": reason_changed,
    "sent-twice": sent_twice,
    "version+1": version_plus_one,
    "older-version": older_version,
}
KINDS = ("payments", "account_totals", "balances", "dead_letter")
STREAM_OF = {"payments": "payments", "account_totals": "payments", "dead_letter": "payments", "balances": "balances"}
ONLY = {"undamaged": ("payments", "balances"), "time+1us": ("payments", "balances"),
        "window_start+1us": ("account_totals",), "window_end+1us": ("account_totals",),
        "null->0": ("payments", "balances"), "moved-coordinate": ("payments", "balances", "dead_letter"),
        "also-dead-letter": ("dead_letter",), "reason-changed": ("dead_letter",), "version+1": ("balances",),
        "older-version": ("balances",), "sent-twice": ("payments", "dead_letter")}
NO_COLUMN = ("bigint+1@", "decimal-", "double-", "0->null")


def not_applicable(sink: str, kind: str, damage: str) -> str | None:
    """Why a damage does not apply to a cell (None: it applies). Only cells that apply are generated."""
    if kind == "dead_letter" and damage.startswith(NO_COLUMN):
        return "the dead-letter table has no such column (its integers are the coordinates: moved-coordinate)"
    if damage in ONLY and kind not in ONLY[damage]:
        return "not this table kind"
    if damage == "sent-twice" and sink != "kafka":
        return "only a Kafka sink's records can be sent twice"
    if damage == "duplicated-row" and sink == "kafka" and kind in ("account_totals", "balances"):
        return "a replace or latest topic's second record of a key is a rewrite (readers keep one row by the rule)"
    return None


#: Cells the proofs do not catch yet (holes), with the reason; strict: the day one is fixed, it fails.
#: (The last, a Delta table's second row of a key, was closed by DeltaSink.duplicate_rows.)
HOLES: dict[tuple[str, str, str], str] = {}


def cells() -> Iterator[Any]:
    for sink in TARGETS:
        for kind in KINDS:
            for damage in DAMAGES:
                if not_applicable(sink, kind, damage):
                    continue
                marks = [pytest.mark.postgres] if sink == "postgres" else []
                hole = HOLES.get((sink, kind, damage)) or HOLES.get(("*", kind, damage))
                if hole:
                    marks.append(pytest.mark.xfail(strict=True, reason=hole))
                yield pytest.param(sink, kind, damage, marks=marks, id=f"{sink}-{kind}-{damage}")


# --------------------------------------------------------------------------- running the cells
class PerThread(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` while cells run side by side: a thread that asked for its own buffer
    (``captured``) writes there, every other write goes where it went before."""

    local = threading.local()

    def __init__(self, original: Any, name: str) -> None:
        self.original, self.name = original, name

    def write(self, text: str) -> int:
        buffer = getattr(self.local, self.name, None)
        return (buffer if buffer is not None else self.original).write(text)

    def flush(self) -> None:
        self.original.flush()


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    PerThread.local.stdout, PerThread.local.stderr = out, err
    try:
        yield out, err
    finally:
        PerThread.local.stdout = PerThread.local.stderr = None


def cli(*argv: str) -> tuple[int, str, str]:
    """``rewind ...`` in this process (in this thread), with its output."""
    from rewind.cli.main import main

    if isinstance(sys.stdout, PerThread):
        with captured() as (out, err):
            code = main(list(argv))
    else:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def write_checkpoint(path: Path, ends: dict[tuple[str, int], int], watermark: datetime) -> None:
    """A checkpoint that committed batch 0 (``offsets/0``, ``commits/0``), in Spark's file format."""
    wm = int(watermark.timestamp() * 1000)
    offsets: dict[str, dict[str, int]] = {}
    for (topic, partition), end in sorted(ends.items()):
        offsets.setdefault(topic, {})[str(partition)] = end
    for d in ("offsets", "commits"):
        (path / d).mkdir(parents=True, exist_ok=True)
    (path / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    meta = {"batchWatermarkMs": wm, "batchTimestampMs": wm + 60_000, "conf": {}}
    (path / "offsets" / "0").write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    (path / "commits" / "0").write_text(f"v1\n{json.dumps({'nextBatchWatermarkMs': wm})}")


def registry_of(home: Path, stream: str, topic: str, sink: str, name: str = "ledger") -> tuple[Path, Any]:
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    reg = write_registry(home / "streams.yaml", demo_stream(name, topic, home, transform=TRANSFORMS[stream],
                                                            sink=sink, **ENTRY_KEYS))
    return reg, load_registry(reg).get(name)


#: Damages of one kind (the real ``run_proof`` proves each kind at least once): an integer +1 at any
#: magnitude, a time +1 us in any column, a null for a 0 or the other way round.
KIND_OF = {**{f"bigint+1@{m}": "bigint+1" for m in MAGNITUDES}, "window_start+1us": "time+1us",
           "window_end+1us": "time+1us", "0->null": "null<->0", "null->0": "null<->0"}


def real_dq(sink: str, kind: str, damage: str) -> bool:
    """Whether a cell runs the real ``run_proof``: each damage kind on the first sink and table kind it
    applies to (SQLite, but for a Kafka record sent twice), its other cells the frames verify built
    (the end-to-end cases run the real one on every sink). The magnitudes of an integer +1 take turns:
    2**53+1 on the first table kind, the others on the next ones."""
    family = KIND_OF.get(damage, damage)
    if family == "undamaged":
        return sink == "sqlite"
    cells = [(s, k, d) for s in TARGETS for k in KINDS for d in DAMAGES
             if KIND_OF.get(d, d) == family and not not_applicable(s, k, d)
             and not (d == "duplicated-row" and s in ("sqlite", "postgres"))]  # there the primary key refuses it
    if family == "bigint+1":  # every magnitude once, on SQLite, each on a table kind of its own
        cells = [("sqlite", k, f"bigint+1@{m}") for k, m in zip(KINDS[:3] + ("payments",), reversed(MAGNITUDES))]
        return (sink, kind, damage) in cells
    return (sink, kind, damage) == cells[0]


@dataclass
class Outcome:
    """What a cell found: the damage's ``Expect`` and both proofs' verdicts, or why it stopped."""

    expect: Expect | None = None
    code: int = -1
    summary: dict[str, Any] = field(default_factory=dict)
    ok: bool = False
    failures: list[Any] = field(default_factory=list)
    refused: bool = False       # the storage refused the damage (a primary key)
    error: BaseException | None = None
    skip: str | None = None
    seconds: float = 0.0


def proofs(spec: Any, reg: Path, bootstrap: str, run_dir: Path, real: bool, out: Outcome) -> None:
    """``rewind verify`` (exit code and JSON), then the DQ proof's verdict and failures: the real
    ``run_proof``, or (see the module docstring) the frames verify built, which are the frames
    ``run_proof`` builds for this range, validated with its suite and no Data Docs."""
    from rewind.proof.checks import CONTRACT_CHECKS, CONTRACT_FRAME_NOTES, CONTRACT_SUITE
    from rewind.proof.gx import validate_frames

    FramesKept.local.frames = []
    code, text, _ = cli("verify", spec.name, "--json", "--registry", str(reg), "--bootstrap", bootstrap)
    out.code, out.summary = code, json.loads(text)
    built, FramesKept.local.frames = FramesKept.local.frames, None
    assert len(built) == 1, "verify built no frames"
    if real:
        from rewind.proof.dq import run_proof

        FramesKept.local.frames = []
        result = run_proof(spec, bootstrap, run_dir=run_dir)
        out.ok, out.failures = result.ok, result.failures
        proved, FramesKept.local.frames = FramesKept.local.frames, None
        for name, frame in built[0].frames().items():  # what the other cells validate in its stead
            pd.testing.assert_frame_equal(frame.reset_index(drop=True), proved[0].frames()[name].reset_index(drop=True))
        return
    v = validate_frames(built[0].frames(), spec.name, "matrix", None, CONTRACT_CHECKS, CONTRACT_SUITE,
                        CONTRACT_FRAME_NOTES)
    out.ok, out.failures = not v.failures, v.failures


class FramesKept:
    """``contract_proof.contract_frames`` that also keeps what it built, for the thread that asks."""

    local = threading.local()

    def __init__(self, frames_of: Callable[..., Any]) -> None:
        self.frames_of = frames_of

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        frames = self.frames_of(*args, **kwargs)
        kept = getattr(self.local, "frames", None)
        if kept is not None:
            kept.append(frames)
        return frames


def run_cell(corpus: Corpus, home: Path, sink: str, kind: str, damage: str, pg_server: str | None) -> Outcome:
    """One cell: a fresh sink with the correct rows of batch 0 and a checkpoint that committed it, the
    damage through the storage, both proofs."""
    from rewind.driver.runner import open_sink

    t0 = time.perf_counter()
    out = Outcome()
    stream = STREAM_OF[kind]
    rows = corpus.rows[stream]
    target = TARGETS[sink](corpus, rows, pg_server)
    try:
        reg, spec = registry_of(home, stream, corpus.topic, target.sink_entry(home, stream))
        with open_sink(spec) as s:
            s.write_batch(0, rows)
        write_checkpoint(Path(spec.checkpoint), corpus.ends, corpus.watermark)
        try:
            out.expect = DAMAGES[damage](Cell(corpus, target, stream, kind, rows))
        except Exception as exc:  # noqa: BLE001 - a primary key refusing a second row: the cell's finding
            if damage == "duplicated-row" and type(exc).__name__ == "IntegrityError":
                out.refused = True
                return out
            raise
        proofs(spec, reg, corpus.bootstrap, home / "dq", real_dq(sink, kind, damage), out)
    except BaseException as exc:  # noqa: BLE001 - reported by the cell's test
        out.error = exc
    finally:
        target.close()
        out.seconds = time.perf_counter() - t0
    return out


#: Cells run side by side: much of a cell's time is waiting (Kafka fetches and metadata, a database).
WORKERS = 6


@contextlib.contextmanager
def quick() -> Iterator[None]:
    """What the cells share that each would otherwise pay for: the CLI's parser, built once (it is
    the same parser: ``main`` still parses, dispatches and maps errors to exit codes), and the objects
    alive before the cells, frozen out of the garbage collector's way (Great Expectations makes
    hundreds of thousands of small objects per validation: ~20 % of its time was collecting them)."""
    import functools
    import gc
    from unittest import mock

    from rewind.cli import main

    gc.collect()
    gc.freeze()
    try:
        with mock.patch.object(main, "build_parser", functools.cache(main.build_parser)):
            yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="module")
def matrix(corpus: Corpus, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[tuple[str, str, str], Outcome]:
    """Every selected cell's outcome, the cells run in ``WORKERS`` threads (Kafka's first)."""
    from unittest import mock

    from rewind.proof import contract_proof, dq

    wanted = [tuple(item.callspec.params[k] for k in ("sink", "kind", "damage")) for item in request.session.items
              if item.module is sys.modules[__name__] and item.originalname == "test_damage_fails_every_proof"]
    pg_server, pg_skip = None, None
    if any(c[0] == "postgres" for c in wanted):
        try:
            pg_server = request.getfixturevalue("postgres_url")
        except pytest.skip.Exception as exc:
            pg_skip = str(exc)
    wanted.sort(key=lambda c: list(TARGETS).index(c[0]) if c[0] != "kafka" else -1)
    results: dict[tuple[str, str, str], Outcome] = {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    streams = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = PerThread(streams[0], "stdout"), PerThread(streams[1], "stderr")
    try:
        kept = FramesKept(contract_proof.contract_frames)
        # dq.py binds contract_frames at its import, which another module may have done already
        with mock.patch.object(contract_proof, "contract_frames", kept), \
                mock.patch.object(dq, "contract_frames", kept), quick(), ThreadPoolExecutor(WORKERS) as pool:
            futures = {}
            for cell in wanted:
                if cell[0] == "postgres" and pg_skip:
                    results[cell] = Outcome(skip=pg_skip)
                    continue
                home = tmp_path_factory.mktemp("-".join(cell).replace("^", "").replace(">", "")[:40])
                futures[cell] = pool.submit(run_cell, corpus, home, *cell, pg_server)
            for cell, future in futures.items():
                results[cell] = future.result()
    finally:
        sys.stdout, sys.stderr = streams
    took = {s: sum(o.seconds for c, o in results.items() if c[0] == s) for s in TARGETS}
    print(f"mutation matrix: {len(results)} cells in {time.perf_counter() - t0:.1f}s wall, {WORKERS} threads, "
          f"{time.process_time() - cpu0:.0f}s of this process's CPU; cell seconds by sink "
          f"{', '.join(f'{k} {v:.0f}' for k, v in took.items())}")
    return results


def judged(expect: Expect, code: int, summary: dict[str, Any], ok: bool, failures: list[Any]) -> None:
    """Both proofs against what the damage must give (``Expect``)."""
    from rewind.proof.verdict import problems_of

    found = problems_of(summary)
    failed = {f.name for f in failures}
    if expect == PASSES:
        assert code == 0 and summary["ok"] and not found, summary
        assert ok and not failures, [(f.name, f.examples) for f in failures]
        return
    assert code == 4 and set(found) == set(expect.problems), (found, summary)
    assert not ok and failed == set(expect.checks), [(f.name, f.examples) for f in failures]
    said = json.dumps([summary[p]["examples"] for p in expect.problems], default=str)
    shown = json.dumps([f.examples for f in failures], default=str)
    for word in expect.tokens:
        assert word in said, f"verify does not say {word!r}: {said[:3000]}"
        assert word in shown, f"the DQ proof does not say {word!r}: {shown[:3000]}"


@pytest.mark.parametrize(("sink", "kind", "damage"), list(cells()))
def test_damage_fails_every_proof(sink: str, kind: str, damage: str,
                                  matrix: dict[tuple[str, str, str], Outcome]) -> None:
    """One cell of the matrix (run by the ``matrix`` fixture): both proofs fail on the damage, naming it;
    the undamaged sink and a double within its tolerance pass both. A SQL table's primary key refuses
    a duplicated row outright (the cell checks that it does)."""
    out = matrix[(sink, kind, damage)]
    if out.skip:
        pytest.skip(out.skip)
    if out.error is not None:
        raise out.error
    if damage == "duplicated-row" and sink in ("sqlite", "postgres"):
        assert out.refused, "the primary key took a second row of a key"
        return
    assert out.expect is not None
    judged(out.expect, out.code, out.summary, out.ok, out.failures)


# --------------------------------------------------------------------------- end to end: the real stream
#: Which stream each sink's end-to-end case runs (both transforms' build() run in Spark on two sinks each).
E2E = {"sqlite": "payments", "postgres": "balances", "kafka": "payments", "delta": "balances"}


@dataclass
class Run:
    """One sink's end-to-end run: the proofs before and after the damage, or why it stopped."""

    before: tuple[int, str, bool, list[Any]] | None = None
    after: tuple[Expect, int, dict[str, Any], bool, list[Any]] | None = None
    error: BaseException | None = None
    skip: str | None = None
    seconds: float = 0.0


def prove_run(corpus: Corpus, sink: str, spec: Any, reg: Path, target: Target, home: Path) -> Run:
    """After the stream: ``verify`` and ``run_proof`` of a correct sink, then one damage (the bigint past
    2**53 of the identity table's row, +1) and both again; ``run_proof`` of the committed range by
    explicit ``bounds`` (as a replay's), since the first proof moved its cursor to the end."""
    from rewind.driver.runner import open_sink
    from rewind.proof.dq import run_proof
    from rewind.proof.scope import committed_position

    t0 = time.perf_counter()
    run = Run()
    try:
        code, out, err = cli("verify", spec.name, "--json", "--registry", str(reg), "--bootstrap", corpus.bootstrap)
        proof = run_proof(spec, corpus.bootstrap, run_dir=home / "dq-before")
        run.before = (code, out + err, proof.ok, proof.failures)
        with open_sink(spec) as s:  # the stream's rows as it wrote them (coordinates, batch ids)
            target.rows = {name: s.read_table(name) for name in s.specs}
        stream = E2E[sink]
        expect = bigint_plus_one("2^53+1")(Cell(corpus, target, stream, stream, target.rows))
        code, out, _ = cli("verify", spec.name, "--json", "--registry", str(reg), "--bootstrap", corpus.bootstrap)
        ends = committed_position(spec).end_offsets or {}
        proof = run_proof(spec, corpus.bootstrap, bounds={k: (0, e) for k, e in ends.items()},
                          run_dir=home / "dq-after")
        run.after = (expect, code, json.loads(out), proof.ok, proof.failures)
    except BaseException as exc:  # noqa: BLE001 - reported by the sink's test
        run.error = exc
    finally:
        target.close()
        run.seconds = time.perf_counter() - t0
    return run


@pytest.fixture(scope="module")
def end_to_end(corpus: Corpus, spark: Any, request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The real stream into each selected sink: its four ``available_now`` queries side by side in the
    session's Spark, then each sink's proofs in a thread of its own."""
    from rewind.driver.runner import build_query

    wanted = [item.callspec.params["sink"] for item in request.session.items
              if item.module is sys.modules[__name__] and item.originalname == "test_the_real_stream_then_one_damage"]
    runs: dict[str, Run] = {}
    started = []
    t0 = time.perf_counter()
    for sink in wanted:
        pg_server = None
        if sink == "postgres":
            try:
                pg_server = request.getfixturevalue("postgres_url")
            except pytest.skip.Exception as exc:
                runs[sink] = Run(skip=str(exc))
                continue
        home = tmp_path_factory.mktemp(f"e2e-{sink}")
        target = TARGETS[sink](corpus, {}, pg_server)
        reg, spec = registry_of(home, E2E[sink], corpus.topic, target.sink_entry(home, E2E[sink]), name=f"e2e_{sink}")
        started.append((sink, spec, reg, target, home, build_query(spark, spec, corpus.bootstrap, available_now=True)))
    for sink, _, _, target, _, query in started:
        if not query.awaitTermination(300) or query.exception() is not None:
            runs[sink] = Run(error=AssertionError(f"the {sink} stream did not finish: {query.exception()}"))
            target.close()
    t1 = time.perf_counter()
    streams = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = PerThread(streams[0], "stdout"), PerThread(streams[1], "stderr")
    try:
        with quick(), ThreadPoolExecutor(len(started) or 1) as pool:
            futures = {sink: pool.submit(prove_run, corpus, sink, spec, reg, target, home)
                       for sink, spec, reg, target, home, _ in started if sink not in runs}
            runs.update({sink: f.result() for sink, f in futures.items()})
    finally:
        sys.stdout, sys.stderr = streams
    print(f"end to end: {len(started)} streams side by side in {t1 - t0:.1f}s, their proofs in "
          f"{time.perf_counter() - t1:.1f}s")
    return runs


@pytest.mark.parametrize("sink", [pytest.param(s, marks=[pytest.mark.postgres] if s == "postgres" else [], id=s)
                                  for s in E2E])
def test_the_real_stream_then_one_damage(sink: str, end_to_end: dict[str, Run]) -> None:
    """The stream's own ``build`` over the same records in Spark (``available_now``) into a fresh sink:
    ``rewind verify`` and ``run_proof`` pass; the identity table's bigint past 2**53 changed by one:
    ``verify`` exits 4 naming the table, the key, the column and both values, and ``run_proof`` agrees."""
    run = end_to_end[sink]
    if run.skip:
        pytest.skip(run.skip)
    if run.error is not None:
        raise run.error
    assert run.before is not None and run.after is not None
    code, said, ok, failures = run.before
    assert code == 0, said
    assert ok, [(f.name, f.examples) for f in failures]
    judged(*run.after)
