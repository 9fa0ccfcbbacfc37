"""A transform's output: one tagged DataFrame, its rows routed to tables, the tables' columns from its schema.

Why: a Spark user already has a job that turns Kafka rows into DataFrames; the contract should
take that code as it is. So ``build`` may return one DataFrame with a ``kind`` column, or a dict
``{table name: DataFrame}`` (``output_frame`` tags and unions it: one ``foreachBatch``, one sink
transaction per batch); rows are routed to tables by their ``kind`` (``route_by_kind``, the
default ``split``); and a table declared without columns (``output_table``) takes the columns
``build`` gives it (``resolved_tables``: ``build`` over an empty batch, so Spark plans but reads
nothing). Spark types map to the sink's portable ones (``PORTABLE``; a Spark ``decimal(P,S)`` stays
``decimal(P,S)``, exact); a type the sinks cannot store, or an aggregate column the output lacks, is
refused naming the table and the column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewind.api.contract import Transform, TransformRefused, check_declarations, check_late_candidates
from rewind.api.routing import KIND, route_by_kind
from rewind.api.tables import Column, TableSpec, decimal_of, output_table
from rewind.driver.late_routing import streaming_candidates
from rewind.driver.spark_session import build_session
from rewind.errors import Refused

__all__ = ["KIND", "output_frame", "output_table", "resolve_from_output", "resolved_tables", "route_by_kind",
           "spark_for", "tagged"]

#: Spark SQL type names (``DataType.typeName()``) -> the sink's portable column types; ``decimal``
#: keeps Spark's precision and scale (``decimal(P,S)``, from ``spark_type_name``), never a double.
PORTABLE = {"string": "string", "integer": "int", "short": "int", "byte": "int", "long": "bigint",
            "double": "double", "float": "double", "decimal": "decimal(P,S)", "timestamp": "timestamp",
            "timestamp_ntz": "timestamp", "binary": "binary"}


def spark_type_name(data_type: Any) -> str:
    """A Spark type's name as ``columns_from_schema`` takes it: ``typeName()`` (``long``, ``integer``),
    with precision and scale for a decimal (``decimal(18,2)``: its typeName() is only ``decimal``)."""
    name = str(data_type.typeName())
    return str(data_type.simpleString()) if name == "decimal" else name




def output_frame(transform: Transform, source: Any, spec: Any) -> Any:
    """``build``'s output as one DataFrame with a ``kind`` column: a dict ``{table: frame}`` is tagged
    (kind = the table's name, or ``late_candidate``) and unioned by column name."""
    return tagged(transform, transform.build(source, spec))


def tagged(transform: Transform, out: Any) -> Any:
    """``build``'s output ``out`` as one DataFrame (``output_frame``, for a caller that already built it)."""
    if not isinstance(out, Mapping):
        return out
    from pyspark.sql import functions as F

    frames = [frame.withColumn(KIND, F.lit(str(kind))) for kind, frame in out.items()]
    if not frames:
        raise TransformRefused(f"{type(transform).__name__}.build returned an empty dict: return one DataFrame per "
                               "table")
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame, allowMissingColumns=True)
    return union


def _empty_source(spark: Any) -> Any:
    """A batch DataFrame with Spark's Kafka columns and no rows: ``build`` plans on it, reads nothing."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
                           T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                           T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
                           T.StructField("timestampType", T.IntegerType())])
    return spark.createDataFrame([], schema)


def output_schemas(transform: Transform, spark: Any, spec: Any) -> dict[str, list[tuple[str, str]]]:
    """Per table (or ``*`` for a single tagged DataFrame), ``build``'s output columns as (name, Spark type)."""
    return schemas_of(transform.build(_empty_source(spark), spec))


def schemas_of(out: Any) -> dict[str, list[tuple[str, str]]]:
    """``output_schemas`` of ``build``'s output ``out``."""
    frames = out if isinstance(out, Mapping) else {"*": out}
    return {str(k): [(f.name, spark_type_name(f.dataType)) for f in frame.schema.fields if f.name != KIND]
            for k, frame in frames.items()}


def columns_from_schema(table: TableSpec, fields: Sequence[tuple[str, str]], where: str) -> TableSpec:
    """``table`` with the columns of ``fields`` (portable types; key columns not null) and ``batch_id``."""
    columns = []
    for name, spark_type in fields:
        if name == "batch_id":
            continue
        portable = PORTABLE.get(spark_type.split("(")[0].strip())
        if portable == PORTABLE["decimal"]:  # Spark's own precision and scale: exact in every sink
            exact = decimal_of(spark_type.strip())
            if exact is None:
                raise TransformRefused(f"{where}: table {table.name!r}: column {name!r} is a Spark {spark_type}: "
                                       "name it with its precision and scale, decimal(P,S) (spark_type_name)")
            portable = f"decimal({exact[0]},{exact[1]})"
        if portable is None:
            raise TransformRefused(f"{where}: table {table.name!r}: column {name!r} is a Spark {spark_type}, which no "
                                   f"sink stores; cast it in build() to one of {sorted(set(PORTABLE))}")
        columns.append(Column(name, portable, name not in table.key and name != table.version))
    columns.append(Column("batch_id", "bigint"))
    names = [c.name for c in columns]
    lacking = [k for k in (*table.key, *([table.version] if table.version else [])) if k not in names]
    if lacking:
        raise TransformRefused(f"{where}: table {table.name!r}: build() outputs no column {lacking[0]!r} (its key or "
                               f"version); it outputs {names[:-1]}")
    return TableSpec(table.name, tuple(columns), table.key, table.on_conflict, table.version,
                     tolerance=table.tolerance)


def resolved_tables(transform: Transform, spec: Any, spark: Any = None) -> tuple[TableSpec, ...]:
    """The transform's tables with every column known: as declared, or from ``build``'s output schema
    (Spark plans ``build`` over an empty batch: the active session, else a local one). The
    declarations are checked again against the resolved columns (an aggregate column the output
    lacks is refused here, naming the table and the column), and so are the late candidates ``build``
    outputs in a streaming query (planned over an empty stream, ``late_routing.streaming_candidates``):
    their dead-letter table needs ``reason`` and ``watermark``, they need ``event_time`` and the
    coordinates."""

    tables = tuple(transform.tables)
    if all(t.resolved for t in tables):
        return tables
    if transform.__dict__.get("_resolved_tables"):
        return transform.__dict__["_resolved_tables"]
    spark = spark or spark_for(spec)
    return _resolve(transform, spec, output_schemas(transform, spark, spec),
                    streaming_candidates(transform, spark, spec))


def resolve_from_output(transform: Transform, spec: Any, out: Any,
                        late: list[tuple[str, str]] | None) -> tuple[TableSpec, ...]:
    """``resolved_tables`` from the output a stream's driver built over its own source (``out``, its late
    candidates ``late``: ``late_routing.late_candidate_fields``): the same columns and checks, without
    planning ``build`` twice more over empty sources."""
    tables = tuple(transform.tables)
    if all(t.resolved for t in tables):
        return tables
    return _resolve(transform, spec, schemas_of(out), late)


def _resolve(transform: Transform, spec: Any, schemas: dict[str, list[tuple[str, str]]],
             late: list[tuple[str, str]] | None) -> tuple[TableSpec, ...]:
    where = f"stream {spec.name}: transform {spec.transform!r}"
    out = []
    for table in transform.tables:
        if table.resolved:
            out.append(table)
            continue
        fields = schemas.get(table.name, schemas.get("*"))
        if fields is None:
            raise TransformRefused(f"{where}: table {table.name!r} has no columns declared and build() returns no "
                                   f"DataFrame for it (it returns {sorted(schemas)}); return one or declare them")
        try:
            out.append(columns_from_schema(table, fields, where))
        except TransformRefused:
            raise
        except Refused as exc:  # the resolved TableSpec refused (rewind.api.tables), e.g. a string version
            raise TransformRefused(f"{where}: {exc}; its columns are what build() outputs for it: cast or rename the "
                                   "column there, or declare the table's columns") from exc
    check_declarations(transform, where, out)
    if late is not None:
        check_late_candidates(transform, out, late, where)
    transform.__dict__["_resolved_tables"] = tuple(out)  # the default split routes to these columns
    return tuple(out)


def spark_for(spec: Any) -> Any:
    """The active Spark session, else a local one for this stream (its `spark_conf`)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active

    return build_session(f"rewind-{spec.name}-bounded", conf={"spark.ui.showConsoleProgress": "false",
                                                             **spec.spark_conf}, sources=False)
