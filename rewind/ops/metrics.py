"""The streams as Prometheus metrics: what the Rewind page shows, in the text format a scraper reads.

Why: the page and its status files stay on the host; a platform team watches Prometheus. Served at
``/rewind/metrics`` beside the page (``rewind_airflow.plugins.ui_app``), built at scrape time from the
same inputs as the page (``rewind.ops.view.read_inputs``: status, failures, newest proof, replay
reports), so the figures are the page's figures. ``families`` is pure (``Inputs`` in, metric families
out); ``render`` writes them with ``prometheus_client``.

Every metric is a gauge labelled ``stream`` (``SPECS`` names each and says what it measures): the page's
state; the last committed batch and its age; the last batch's input and processing rates, duration and
watermark (Spark's progress), state rows (when the state store counts them); lag per partition and
its sum (the driver's lag probe); records routed behind the watermark; recoveries by cause and the
crash-loop verdict (the supervisor's memory); the newest proof's verdict and age; replays by status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from rewind.ops.view import Inputs, derive_state

STATES = ("running", "recovering", "failed", "stopped")


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ("stream",)) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, labels=list(labels))


def families(inputs: Iterable[Inputs], now: float) -> list[Any]:
    """The metric families of every stream in ``inputs`` (a family per metric, a sample per stream)."""
    g = {name: _gauge(name, doc, labels) for name, doc, labels in SPECS}
    for inp in inputs:
        for name, labels, value in samples(inp, now):
            g[name].add_metric([inp.stream, *labels], value)
    return list(g.values())


def samples(inp: Inputs, now: float) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """``(metric, extra label values, value)`` for one stream; a figure nobody measured yields no sample."""
    st = inp.status
    state, _, _ = derive_state(st, inp.process_alive, inp.failures, now, inp.thresholds)
    yield "rewind_stream_up", (), 1.0 if state == "running" else 0.0
    for s in STATES:
        yield "rewind_stream_state", (s,), 1.0 if s == state else 0.0
    if st is not None:
        if st.last_batch_id is not None:
            yield "rewind_stream_last_batch_id", (), float(st.last_batch_id)
        if st.last_batch_at is not None:
            yield "rewind_stream_last_batch_age_seconds", (), max(0.0, now - st.last_batch_at)
        p = st.progress or {}
        for key, metric, scale in (("input_rows_per_second", "rewind_stream_input_rows_per_second", 1.0),
                                   ("processed_rows_per_second", "rewind_stream_processed_rows_per_second", 1.0),
                                   ("batch_duration_ms", "rewind_stream_batch_duration_seconds", 0.001),
                                   ("watermark", "rewind_stream_watermark_seconds", 1.0),
                                   ("state_rows", "rewind_stream_state_rows", 1.0)):
            if p.get(key) is not None:
                yield metric, (), float(p[key]) * scale
        for key, n in st.lag.items():
            topic, _, part = key.rpartition("/")
            yield "rewind_stream_lag_records", (topic, part), float(n)
        if st.lag:
            yield "rewind_stream_lag_records_sum", (), float(st.total_lag)
        if st.lag_at is not None:
            yield "rewind_stream_lag_checked_age_seconds", (), max(0.0, now - st.lag_at)
        yield "rewind_stream_late_routed_records", (), float(st.late_routed_total)
    failures = inp.failures.get("failures") or []
    for cause, n in sorted(Counter(str(f.get("cause")) for f in failures).items()):
        yield "rewind_stream_recoveries", (cause,), float(n)
    if failures:
        yield "rewind_stream_last_failure_timestamp_seconds", (), float(failures[-1]["at"])
    yield "rewind_stream_gave_up", (), 1.0 if inp.failures.get("gave_up") else 0.0
    if inp.proof:
        verdict = "nothing_to_prove" if inp.proof.get("nothing_to_prove") else \
            "pass" if inp.proof.get("ok") else "fail"
        yield "rewind_proof_ok", (), 1.0 if inp.proof.get("ok") else 0.0
        for v in ("pass", "fail", "nothing_to_prove"):
            yield "rewind_proof_verdict", (v,), 1.0 if v == verdict else 0.0
        yield "rewind_proof_expectations", (), float(inp.proof.get("expectations") or 0)
        if inp.proof_at is not None:
            yield "rewind_proof_age_seconds", (), max(0.0, now - inp.proof_at)
    for status, n in sorted(Counter(str(r.get("status")) for r in inp.replay_reports).items()):
        yield "rewind_replays", (status,), float(n)
    yield "rewind_replay_running", (), 1.0 if inp.replay_holder else 0.0


SPECS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("rewind_stream_up", "1 when the stream is running (the Rewind page's state)", ("stream",)),
    ("rewind_stream_state", "1 for the stream's state on the Rewind page", ("stream", "state")),
    ("rewind_stream_last_batch_id", "the last committed micro-batch", ("stream",)),
    ("rewind_stream_last_batch_age_seconds", "seconds since the last batch committed", ("stream",)),
    ("rewind_stream_input_rows_per_second", "input rate of the last batch (Spark's progress)", ("stream",)),
    ("rewind_stream_processed_rows_per_second", "processing rate of the last batch (Spark's progress)", ("stream",)),
    ("rewind_stream_batch_duration_seconds", "how long the last batch took", ("stream",)),
    ("rewind_stream_lag_records", "records behind the end of the partition", ("stream", "topic", "partition")),
    ("rewind_stream_lag_records_sum", "records behind, over all partitions", ("stream",)),
    ("rewind_stream_lag_checked_age_seconds", "seconds since Kafka's partition ends were asked", ("stream",)),
    ("rewind_stream_watermark_seconds", "the event-time watermark of the last batch (epoch seconds)", ("stream",)),
    ("rewind_stream_state_rows", "rows held by the state operators (when the state store counts them)",
     ("stream",)),
    ("rewind_stream_late_routed_records", "records routed to the dead letters as behind the watermark (this driver)",
     ("stream",)),
    ("rewind_stream_recoveries", "failures the supervisor recorded and recovered from, by cause (since its reset)",
     ("stream", "cause")),
    ("rewind_stream_last_failure_timestamp_seconds", "when the last recorded failure happened", ("stream",)),
    ("rewind_stream_gave_up", "1 while the supervisor's crash-loop verdict stands", ("stream",)),
    ("rewind_proof_ok", "1 when the newest DQ proof passed (or had nothing to prove)", ("stream",)),
    ("rewind_proof_verdict", "1 for the newest proof's verdict", ("stream", "verdict")),
    ("rewind_proof_expectations", "expectations the newest proof ran", ("stream",)),
    ("rewind_proof_age_seconds", "seconds since the newest proof", ("stream",)),
    ("rewind_replays", "the newest replay reports, by status", ("stream", "status")),
    ("rewind_replay_running", "1 while a replay of the stream holds its lock", ("stream",)),
)


def render(inputs: Iterable[Inputs], now: float) -> bytes:
    """The Prometheus text format of ``families`` (``prometheus_client.generate_latest``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    fams = families(inputs, now)

    class Snapshot:
        def collect(self) -> list[Any]:
            return fams

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot())  # type: ignore[arg-type]
    return bytes(generate_latest(registry))
