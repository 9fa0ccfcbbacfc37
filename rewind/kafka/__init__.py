"""Rewind's Kafka source for PySpark (``format("rewind_kafka")``) and Rewind's own Kafka clients.

A map, from the words up to the source (each module imports only those above it in this list):

- ``types``: ``TP``, ``Offsets``, ``OffsetRange``, their JSON form, and every Kafka error;
- ``alignment``: event-time alignment at admission (pure);
- ``options``: the source's options parsed and checked into ``SourceOptions`` (pure);
- ``offsets``: the pure decisions: resolving positions, data loss, rate limits, planning ranges;
- ``client_logs``: librdkafka's log lines through Python logging, repeats held back;
- ``client_config``: the settings of every client (``base_consumer_config``, Java names translated);
- ``client_errors``: what librdkafka's errors mean (transient, rejected credentials);
- ``lookups``: partitions, earliest/end offsets, times (``KafkaOffsetClient``, ``check_reachable``);
- ``reader``: reading records (``iter_range``: one range; ``read_to_end``: whole topics;
  ``record_timestamps``: the record at each position, for alignment);
- ``columns``: Spark's Kafka columns and records turned into Arrow batches;
- ``source``: ``KafkaDataSource``, the Python Data Source; its docstring is the option table.

``types``, ``alignment``, ``options`` and ``offsets`` need neither PySpark nor confluent-kafka;
only ``columns`` and ``source`` need PySpark.
"""
