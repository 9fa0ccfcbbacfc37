"""Replays: re-read an exact Kafka range through a stream's own transform into its sink, and prove it.

Read in the order a replay runs (each module imports only those above it):

- ``problems``: ``Problem`` and ``ReplayRefused`` (every refusal lists all of its problems);
- ``request``: parse and check what was asked (bounds, topics, partitions; pure);
- ``plan``: the exact ``[start, end)`` per partition and its notes (pure), and ``format_plan``;
- ``planner``: ``plan_replay``, the one place a plan asks Kafka (look-ups, record counts);
- ``guard``: the replay id, the one-replay-per-stream lock, shadow table names;
- ``setup``: ``prepare_replay``, a validated ``ReplaySetup``, its chunks and source options (pure);
- ``report``: what a replay did, stored locally and in S3; ``ReplayFailed``/``ReplayProofFailed``;
- ``windows``, ``shadow``: window results recomputed from raw events; shadow vs main comparison;
- ``job``: the Spark work, chunk by chunk; ``run``: the dry run and ``run_replay`` (lock, report, proof).
"""
