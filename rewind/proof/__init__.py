"""Proofs that a stream's sink holds every Kafka record exactly once, judged from the data.

Two proofs over the same reading of Kafka:

- ``verify``: the plain checker (``verify_stream``: counts and examples, no Great Expectations),
  used by tests, the chaos harness and ``rewind verify``; also reads Kafka for both proofs.
- ``dq``: the data-quality proof (``run_proof``) with Great Expectations and Data Docs, run by
  the DQ DAG, the supervisor's ``prove`` step, replays and ``rewind dq``. Its parts, one role each:
  ``checks`` (what is proved), ``frames`` / ``contract_frames`` (Kafka and the sink as frames to
  judge, pure), ``aggregates`` (aggregate rows against their recomputation, pure), ``gx`` (running
  the suite), ``report`` (the result and its log text), ``publish`` (storing it).

A record is judged by the stream's own transform (``rewind.api.contract``): its ``expect()``,
or its ``build()`` run as a bounded batch (``batch_build``); no proof imports a stream's code.
"""
