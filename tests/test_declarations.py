"""Declarations the proofs cannot use are refused when the stream loads or its tables resolve, in one line
naming the stream, the class, the table or column and the fix (``rewind.api.contract.check_declarations``,
``check_late_candidates``, ``rewind.driver.outputs.resolved_tables``).

Pure: tables with declared columns, columns resolved with ``columns_from_schema``, and ``resolved_tables``
with ``build``'s schemas given; one test plans real ``build`` functions on the session's Spark.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rewind.api.contract import (
    Aggregate,
    Identity,
    Transform,
    TransformRefused,
    check_declarations,
    check_late_candidates,
    load_transform,
)
from rewind.api.late import LATE_CANDIDATE
from rewind.api.tables import Column, TableSpec
from rewind.driver.outputs import columns_from_schema, output_table

WHERE = "stream s: transform 'm:T'"
COORD_COLUMNS = (Column("topic", "string", False), Column("partition", "int", False), Column("offset", "bigint", False))
ROWS = TableSpec("rows", (Column("id", "string", False), Column("amount", "double"), Column("event_time", "timestamp"),
                          *COORD_COLUMNS, Column("batch_id", "bigint")), ("id",), "ignore")
DEAD = TableSpec("dead_letter", (*COORD_COLUMNS, Column("reason", "string", False), Column("watermark", "timestamp"),
                                 Column("batch_id", "bigint")), ("topic", "partition", "offset"), "ignore")
DEAD_NO_WATERMARK = TableSpec("dead_letter", DEAD.columns[:4] + DEAD.columns[5:], DEAD.key, "ignore")
TOTALS = TableSpec("totals", (Column("window_start", "timestamp", False), Column("merchant", "string", False),
                              Column("total", "double"), Column("batch_id", "bigint")),
                   ("window_start", "merchant"), "replace")
#: Spark fields (name, typeName) of a payments stream's outputs, as ``output_schemas`` gives them.
PAY_FIELDS = [("payment_id", "string"), ("merchant", "string"), ("amount", "double"), ("event_time", "timestamp"),
              ("topic", "string"), ("partition", "integer"), ("offset", "long"), ("kafka_timestamp", "timestamp")]
DEAD_FIELDS = [("topic", "string"), ("partition", "integer"), ("offset", "long"), ("kafka_timestamp", "timestamp"),
               ("reason", "string")]


class Declared(Transform):
    """A transform made of declarations only (``build`` is never called by these checks)."""

    tables: Sequence[TableSpec] = (ROWS, DEAD)

    def build(self, source: Any, spec: Any) -> Any:
        raise AssertionError("not called")


def refusal(transform: Transform, tables: Sequence[TableSpec] | None = None) -> str:
    """The one-line message ``check_declarations`` refuses ``transform`` with."""
    with pytest.raises(TransformRefused) as info:
        check_declarations(transform, WHERE, tables)
    message = str(info.value)
    assert message.startswith(f"{WHERE}: ") and "\n" not in message
    return message


def make(**members: Any) -> Transform:
    return type("T", (Declared,), members)()


# --------------------------------------------------------------------------- dead letters and late records


def test_a_stream_with_aggregates_needs_a_watermark_column_for_its_late_dead_letters() -> None:
    aggregated = {"tables": (ROWS, TOTALS, DEAD_NO_WATERMARK), "aggregates": (Aggregate("totals", keys=("merchant",)),)}
    message = refusal(make(**aggregated))
    assert "dead-letter table 'dead_letter' has no 'watermark' column, but it declares aggregates" in message
    assert "add a nullable timestamp column 'watermark' (declared: Column('watermark', 'timestamp')" in message
    check_declarations(make(tables=(ROWS, TOTALS, DEAD), aggregates=aggregated["aggregates"]), WHERE)
    check_declarations(make(tables=(ROWS, DEAD_NO_WATERMARK)), WHERE)  # stateless: nothing is ever late


def test_resolved_dead_letters_without_a_watermark_are_refused_when_build_outputs_late_candidates() -> None:
    """The docs' smallest form: the dead-letter table's columns come from build(), whose dead letters have no
    watermark column; its streaming build tags late candidates. The batch writer would drop their watermark."""
    t = make(tables=(output_table("rows", key=("id",)), output_table("dead_letter", key=("topic", "partition",
                                                                                       "offset"))))
    rows = columns_from_schema(t.tables[0], [("id", "string"), *PAY_FIELDS[2:]], WHERE)
    dead = columns_from_schema(t.tables[1], DEAD_FIELDS, WHERE)
    check_declarations(t, WHERE, (rows, dead))  # alone, nothing says records are ever late
    with pytest.raises(TransformRefused) as info:
        check_late_candidates(t, (rows, dead), [("id", "string"), *PAY_FIELDS[2:]], WHERE)
    message = str(info.value)
    assert message.startswith(WHERE) and "\n" not in message
    assert ("dead-letter table 'dead_letter' has no 'watermark' column, but its build() outputs late candidates "
            "(LATE_CANDIDATE) in a streaming query") in message
    assert "F.lit(None).cast('timestamp').alias('watermark')" in message
    with_watermark = columns_from_schema(t.tables[1], [*DEAD_FIELDS, ("watermark", "timestamp")], WHERE)
    check_late_candidates(t, (rows, with_watermark), [("id", "string"), *PAY_FIELDS[2:]], WHERE)


@pytest.mark.parametrize("fields, fix", [
    ([("id", "string"), ("topic", "string"), ("partition", "integer"), ("offset", "long")],
     "need an 'event_time' timestamp column (the batch writer keeps those behind the watermark by it; they have"),
    ([("id", "string"), ("event_time", "string"), ("topic", "string"), ("partition", "integer"), ("offset", "long")],
     "need an 'event_time' timestamp column (the batch writer keeps those behind the watermark by it; it is a "
     "Spark string)"),
    ([("id", "string"), ("event_time", "timestamp"), ("topic", "string")],
     "lack the Kafka coordinates ['partition', 'offset'] (they become dead letters keyed by them"),
])
def test_late_candidates_need_an_event_time_and_their_coordinates(fields: list[tuple[str, str]], fix: str) -> None:
    with pytest.raises(TransformRefused) as info:
        check_late_candidates(make(), (ROWS, DEAD), fields, WHERE)
    assert fix in str(info.value) and "late_routing.candidates()" in str(info.value)
    assert str(info.value).startswith(WHERE) and "\n" not in str(info.value)


def test_a_not_null_dead_letter_column_late_candidates_do_not_carry_is_refused() -> None:
    strict = TableSpec("dead_letter", (*DEAD.columns, Column("raw_value", "string", False)), DEAD.key, "ignore")
    with pytest.raises(TransformRefused, match="column 'raw_value' is NOT NULL, but the late candidates "
                                               r"\(LATE_CANDIDATE\) that become dead letters do not carry it: make it "
                                               "nullable"):
        check_late_candidates(make(tables=(ROWS, strict)), (ROWS, strict), PAY_FIELDS, WHERE)


@pytest.mark.parametrize("fields, fix", [
    ([("topic", "string"), ("partition", "integer"), ("offset", "long")],
     r"must have columns ['topic', 'partition', 'offset', 'reason'] (lacking ['reason']"),
    ([*DEAD_FIELDS[:4], ("reason", "integer")], "column 'reason' must be a string, not int"),
    ([*DEAD_FIELDS, ("watermark", "long")], "column 'watermark' must be a timestamp, not bigint"),
])
def test_resolved_dead_letter_columns_are_checked(fields: list[tuple[str, str]], fix: str) -> None:
    t = make(tables=(ROWS, output_table("dead_letter", key=("topic", "partition", "offset"))))
    check_declarations(t, WHERE)  # declared without columns: checked once resolved
    assert fix in refusal(t, (ROWS, columns_from_schema(t.tables[1], fields, WHERE)))


def test_the_dead_letter_table_is_keyed_by_the_coordinates() -> None:
    by_offset = output_table("dead_letter", key=("offset",))
    assert "must be keyed by the Kafka coordinates ['topic', 'partition', 'offset'] (one dead letter per record), " \
           "not ['offset']: set key=('topic', 'partition', 'offset')" in refusal(make(tables=(ROWS, by_offset)))
    assert "dead-letter table 'dead' must be among its tables" in refusal(make(dead_letter_table="dead"))


# --------------------------------------------------------------------------- the identity


def test_without_expect_the_identity_table_carries_the_coordinates() -> None:
    bare = TableSpec("rows", ROWS.columns[:3] + ROWS.columns[6:], ("id",), "ignore")
    message = refusal(make(tables=(bare, DEAD)))
    assert ("without expect(), the rows of identity table 'rows' must carry the Kafka coordinates ['topic', "
            "'partition', 'offset']") in message and "or implement expect()" in message
    check_declarations(make(tables=(bare, DEAD), expect=lambda self, records, spec: records), WHERE)
    resolved = columns_from_schema(output_table("rows", key=("id",)), [("id", "string"), ("amount", "double")], WHERE)
    assert "must carry the Kafka coordinates" in refusal(make(tables=(output_table("rows", key=("id",)), DEAD)),
                                                         (resolved, DEAD))
    coords = columns_from_schema(output_table("rows", key=("topic", "partition", "offset")), PAY_FIELDS, WHERE)
    check_declarations(make(tables=(coords, DEAD)), WHERE)  # the identity is the coordinates


def test_the_identity_is_not_the_dead_letter_table_and_its_columns_are_a_tuple() -> None:
    assert "identity table 'dead_letter' is also the dead-letter table" in refusal(
        make(identity=Identity("dead_letter", ("topic", "partition", "offset"))))
    assert "identity columns must be a tuple of column names, not the string 'id': write columns=('id',)" in \
        refusal(make(identity=Identity("rows", "id")))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- kinds and aggregates


def test_kinds_route_to_tables_it_has_and_late_candidates_to_the_dead_letters() -> None:
    assert "kinds maps 'row' to 'rowz', which is not among its tables" in refusal(make(kinds={"row": "rowz"}))
    assert f"kinds maps {LATE_CANDIDATE!r} to 'rows'" in refusal(make(kinds={LATE_CANDIDATE: "rows"}))
    own_split = make(kinds={"row": "rowz"}, split=lambda self, frame, batch_id: {})
    check_declarations(own_split, WHERE)  # kinds are the default split's


def test_an_aggregate_is_selected_by_the_kind_its_rows_come_as() -> None:
    tables = (ROWS, TOTALS, DEAD)
    no_kind = make(tables=tables, kinds={"window": "totals"}, aggregates=(Aggregate("totals", keys=("merchant",)),))
    assert "its rows come as kind 'window' (kinds), but the Aggregate names no kind" in refusal(no_kind)
    assert "add kind='window' to the Aggregate" in refusal(no_kind)
    elsewhere = make(tables=tables, aggregates=(Aggregate("totals", keys=("merchant",), kind="window"),))
    assert "its kind 'window' is not routed to it" in refusal(elsewhere)
    check_declarations(make(tables=tables, kinds={"window": "totals"},
                            aggregates=(Aggregate("totals", keys=("merchant",), kind="window"),)), WHERE)
    twice = make(tables=tables, aggregates=(Aggregate("totals", keys=("merchant",)),) * 2)
    assert "aggregate table 'totals' is declared twice" in refusal(twice)


def test_a_resolved_window_column_must_be_a_timestamp() -> None:
    t = make(tables=(ROWS, output_table("totals", key=("window_start", "merchant"), on_conflict="replace"), DEAD),
             aggregates=(Aggregate("totals", keys=("merchant",)),))
    check_declarations(t, WHERE)
    totals = columns_from_schema(t.tables[1], [("window_start", "string"), ("merchant", "string"),
                                               ("total", "double")], WHERE)
    assert "window column 'window_start' must be a timestamp (the window's start), not string: output " \
           "F.window(...).start as it" in refusal(t, (ROWS, totals, DEAD))


# --------------------------------------------------------------------------- resolved_tables (build's schemas given)


def spec_of(transform: str = "m:T") -> Any:
    durations = {"trigger": timedelta(seconds=2), "window": timedelta(seconds=10),
                 "watermark_delay": timedelta(seconds=30), "allowed_lateness": timedelta(seconds=20)}
    return SimpleNamespace(name="s", transform=transform, spark_conf={}, durations=lambda: durations)


def resolve(monkeypatch: pytest.MonkeyPatch, transform: Transform, schemas: dict[str, list[tuple[str, str]]],
            late: list[tuple[str, str]] | None) -> Any:
    import rewind.driver.outputs as outputs

    # where resolved_tables finds them (outputs imports streaming_candidates from late_routing)
    monkeypatch.setattr(outputs, "output_schemas", lambda t, spark, spec: schemas)
    monkeypatch.setattr(outputs, "streaming_candidates", lambda t, spark, spec: late)
    return outputs.resolved_tables(transform, spec_of(), spark=object())


def test_resolved_tables_refuses_late_candidates_the_dead_letters_cannot_hold(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    t = make(tables=(output_table("payments", key=("payment_id",)),
                     output_table("dead_letter", key=("topic", "partition", "offset"))))
    schemas = {"payments": PAY_FIELDS, "dead_letter": DEAD_FIELDS}
    assert [x.name for x in resolve(monkeypatch, t, schemas, None)] == ["payments", "dead_letter"]
    t = make(tables=t.tables)
    with pytest.raises(TransformRefused, match=r"^stream s: transform 'm:T': dead-letter table 'dead_letter' has no "
                                               r"'watermark' column, but its build\(\) outputs late candidates"):
        resolve(monkeypatch, t, schemas, PAY_FIELDS)
    assert "_resolved_tables" not in t.__dict__  # nothing kept: the next start refuses again
    ok = resolve(monkeypatch, t, {**schemas, "dead_letter": [*DEAD_FIELDS, ("watermark", "timestamp")]}, PAY_FIELDS)
    assert "watermark" in ok[1].column_names


def test_a_resolved_latest_table_needs_an_orderable_version(monkeypatch: pytest.MonkeyPatch) -> None:
    stock = output_table("stock", key=("sku",), on_conflict="latest", version="version")
    t = make(tables=(stock, DEAD))
    fields = [("sku", "string"), ("qty", "long"), ("topic", "string"), ("partition", "integer"), ("offset", "long")]
    with pytest.raises(TransformRefused) as info:
        resolve(monkeypatch, t, {"stock": [*fields, ("version", "string")]}, None)
    message = str(info.value)
    assert message.startswith("stream s: transform 'm:T': table 'stock': version column 'version' must be a non-null "
                              "int, bigint, double or timestamp") and "\n" not in message
    assert "cast or rename the column there" in message
    resolved = resolve(monkeypatch, make(tables=(stock, DEAD)), {"stock": [*fields, ("version", "long")]}, None)
    assert [(c.type, c.nullable) for c in resolved[0].columns if c.name == "version"] == [("bigint", False)]


def test_a_table_spec_refused_at_import_names_the_stream(tmp_path: Path) -> None:
    (tmp_path / "bad_tables.py").write_text(
        "from rewind.api.tables import Column, TableSpec\n"
        "from rewind.api.contract import Transform\n"
        "STOCK = TableSpec('stock', (Column('sku', 'string', False), Column('version', 'string', False)), ('sku',),\n"
        "                  'latest', version='version')\n"
        "class T(Transform):\n    tables = (STOCK,)\n    def build(self, source, spec):\n        return source\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(TransformRefused, match=r"^stream s: transform 'bad_tables:T': table 'stock': version "
                                                   "column 'version' must be a non-null int"):
            load_transform(spec_of("bad_tables:T"))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("bad_tables", None)


# --------------------------------------------------------------------------- real build() functions, planned by Spark


def test_late_candidates_are_found_in_the_streaming_plan(spark: Any) -> None:
    """The payments stream (dict, late candidates only when streaming) and a single tagged frame: Spark plans
    build() over an empty stream; a dead-letter frame without a watermark column is refused at resolution."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from streams.payments_stream import PaymentsTransform, Undeclared
    finally:
        sys.path.remove(str(Path(__file__).parent))
    from rewind.driver.late_routing import streaming_candidates
    from rewind.driver.outputs import resolved_tables

    late = streaming_candidates(PaymentsTransform(), spark, spec_of())
    assert late is not None and ("event_time", "timestamp") in late and ("offset", "long") in late
    tables = resolved_tables(PaymentsTransform(), spec_of(), spark)
    assert "watermark" in tables[2].column_names

    class NoWatermark(Undeclared):  # no aggregates declared: only the streaming plan says records may be late
        def build(self, source: Any, spec: Any) -> Any:
            out = super().build(source, spec)
            out["dead_letter"] = out["dead_letter"].drop("watermark")
            return out

    with pytest.raises(TransformRefused, match=r"dead-letter table 'dead_letter' has no 'watermark' column, but its "
                                               r"build\(\) outputs late candidates \(LATE_CANDIDATE\)"):
        resolved_tables(NoWatermark(), spec_of(), spark)

    class Aggregated(NoWatermark):
        aggregates = PaymentsTransform.aggregates

    with pytest.raises(TransformRefused, match="has no 'watermark' column, but it declares aggregates"):
        resolved_tables(Aggregated(), spec_of(), spark)

    class Tagged(PaymentsTransform):
        """One DataFrame with a kind column, late candidates included only when streaming."""

        def build(self, source: Any, spec: Any) -> Any:
            from pyspark.sql import functions as F

            frame = source.select("topic", "partition", "offset", F.col("timestamp").alias("event_time"),
                                  F.lit("payments").alias("kind"))
            return frame.unionByName(frame.withColumn("kind", F.lit(LATE_CANDIDATE))) if source.isStreaming \
                else frame

    assert streaming_candidates(Tagged(), spark, spec_of()) == [("topic", "string"), ("partition", "integer"),
                                                                ("offset", "long"), ("event_time", "timestamp")]

    class Stateless(Tagged):
        def build(self, source: Any, spec: Any) -> Any:
            from pyspark.sql import functions as F

            return source.select("topic", "partition", "offset", F.lit("payments").alias("kind"))

    assert streaming_candidates(Stateless(), spark, spec_of()) is None

    # A stream's driver plans build() once, over its own source, and resolves from that output
    # (rewind.driver.runner.build_query): the same tables and the same refusals as over empty sources.
    from rewind.driver.late_routing import empty_stream, late_candidate_fields
    from rewind.driver.outputs import resolve_from_output

    def from_output(t: Any) -> Any:
        built = t.build(empty_stream(spark), spec_of())
        return resolve_from_output(t, spec_of(), built, late_candidate_fields(built))

    assert from_output(PaymentsTransform()) == tables
    assert "watermark" in from_output(PaymentsTransform())[2].column_names
    with pytest.raises(TransformRefused, match=r"dead-letter table 'dead_letter' has no 'watermark' column, but its "
                                               r"build\(\) outputs late candidates \(LATE_CANDIDATE\)"):
        from_output(NoWatermark())
