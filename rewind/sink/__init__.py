"""Sinks: where a stream's output tables are written exactly once.

``contract`` (the abstract ``Sink``: its docstrings are the promises every sink keeps; the tables it
takes are ``rewind.api.tables``' ``TableSpec``s), ``errors`` (``SinkRefused`` / ``SinkError``),
``convert`` (rows -> driver values, the hot path), ``dialects`` (SQLite and PostgreSQL),
``sql`` (``ExactlyOnceSqlSink``) with ``staging`` (executors prepare, the driver commits),
``kafka`` (``TransactionalKafkaSink``) with ``kafka_target``, ``kafka_codec``, ``kafka_txn``,
``kafka_ledger`` and ``kafka_mirror``, ``delta`` (``DeltaSink``) with ``delta_target`` and
``delta_tables``, ``deletes`` (a replay's removals). See docs/sinks.md.
"""
