"""OpenLineage run events of a stream's driver and of a replay: what ran, on which topics, into which tables.

Read in this order (each module imports only those above it):

- ``naming``: the datasets as the OpenLineage naming spec names them: Kafka topics, SQL, Kafka and Delta
  tables (pure);
- ``parent``: the parent run (the Airflow task that launched the job), as the OpenLineage provider passes it
  to a Spark submit, both ways: written by the launching task, read by the driver (pure);
- ``config``: is a transport configured (the client's own discovery), the RUNNING interval, and the no-op
  ``Lineage`` that every caller gets when it is not;
- ``events``: the run events built from plain dataclasses (START, RUNNING, COMPLETE, FAIL, ABORT);
- ``emitter``: the client's edge: one background thread, a bounded queue, errors logged once per kind;
- ``runs``: the lineage of one driver run and of one replay, as their code calls it.

``docs/lineage.md`` says what is emitted, when, and how to configure the transport.
"""
