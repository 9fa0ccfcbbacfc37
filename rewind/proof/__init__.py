"""Proofs that a stream's sink holds every Kafka record exactly once, judged from the data.

Two proofs over the same reading of Kafka:

- ``verify``: the plain checker (``verify_stream``: counts and examples, no Great Expectations),
  used by tests, the chaos harness and ``rewind verify``; also reads Kafka for both proofs.
- ``dq``: the data-quality proof (``run_proof``) with Great Expectations and Data Docs, run by
  the DQ DAG, the supervisor's ``prove`` step, replays and ``rewind dq``. Its parts, one role each:
  ``checks`` (what is proved), ``frames`` (Kafka and the sink as frames to judge, pure),
  ``gx`` (running the suite), ``report`` (the result and its log text), ``publish`` (storing it).
- ``classify``: the stream's record classifier, the one import of demo code (issue 15).
"""
