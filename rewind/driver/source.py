"""The stream's Kafka source as Spark reads it: checked before Spark starts, its options for the
live query, and the same options for a bounded batch read (a replay's chunks, a standby's warm-up)."""

from __future__ import annotations

from typing import Any

from rewind.driver.spark_session import ensure_source
from rewind.kafka.client_config import kafka_options
from rewind.kafka.lookups import check_reachable
from rewind.kafka.types import offsets_json_text
from rewind.runtime.jars import connector_jars, spark_packages_name_connector

__all__ = ["POSITION_KEYS", "bounded_options", "bounded_read", "check_source", "source_options"]

#: Options that position or pace a stream; a bounded read's own offsets replace them.
POSITION_KEYS = ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
                 "startingoffsetsbytimestampstrategy", "endingoffsets", "endingtimestamp",
                 "endingoffsetsbytimestamp", "maxoffsetspertrigger")


def check_source(spec: Any, bootstrap: str) -> None:
    """Refuse before Spark starts: an unreachable bootstrap, a missing topic, a missing connector."""

    if spec.source.format == "kafka":

        if not spark_packages_name_connector():  # else Spark resolves the connector (compose)
            connector_jars(required=True)
    check_reachable(bootstrap, spec.topics, kafka_options(spec.source.options), partitions=spec.partitions)


#: Options that say where a new stream starts reading.
START_KEYS = ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp")


def source_options(spec: Any, bootstrap: str) -> dict[str, str]:
    """The source's options: the registry's, with the bootstrap, the topics, ``read_committed`` and
    ``startingOffsets: earliest`` unless the registry says otherwise. Why ``read_committed``: Spark's
    connector reads ``read_uncommitted`` (the Java client's default), so records of aborted transactions
    would reach the sink, while every proof (librdkafka, ``read_committed`` by default) counts only
    committed ones. Why ``earliest`` (Flink's KafkaSource default too): Spark's own is ``latest``, so a
    new stream whose entry said nothing skipped every record already in its topics, and its proof, which
    answers for every record below the committed end, failed on all of them (found writing a stream from
    the docs alone). It only places a new checkpoint's first batch; a running stream resumes where it was."""
    start = {} if any(k.lower() in START_KEYS for k in spec.source.options) else {"startingOffsets": "earliest"}
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": ",".join(spec.topics),
            "kafka.isolation.level": "read_committed", **start, **spec.source.options}


def bounded_options(spec: Any, bootstrap: str, topics: list[str]) -> dict[str, str]:
    """The stream's own source options for a bounded batch read of ``topics`` (its positioning and
    pacing options dropped: the read's startingOffsets/endingOffsets replace them)."""
    opts = {k: v for k, v in source_options(spec, bootstrap).items() if k.lower() not in POSITION_KEYS}
    opts["subscribe"] = ",".join(topics)
    return opts


def bounded_read(spark: Any, spec: Any, options: dict[str, str], ranges: dict[Any, tuple[int, int]]) -> Any:
    """A batch DataFrame of exactly ``[start, end)`` per partition with the stream's source format and
    ``options`` (``bounded_options``); a batch read with per-partition offsets must name every
    partition of its topics."""

    ensure_source(spark, spec.source.format)
    return (spark.read.format(spec.source.format).options(**options)
            .option("startingOffsets", offsets_json_text({tp: s for tp, (s, _) in ranges.items()}))
            .option("endingOffsets", offsets_json_text({tp: e for tp, (_, e) in ranges.items()})).load())
