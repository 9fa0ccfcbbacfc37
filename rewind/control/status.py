"""Per-stream status: heartbeat, progress and lag, written by the running stream.

The supervisor (and the UI) read it instead of talking to Spark, so a dead driver is visible as a
stale heartbeat. The running driver writes it through a *channel*: ``FileChannel`` (a file,
written atomically by rename: one host, and the tests) or ``rewind.control.status_store.StoreChannel``
(the stream's control store, fenced by the driver's lease epoch).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rewind.paths import history_path


@dataclass
class StreamStatus:
    stream: str
    state: str = "starting"  # starting | running | stopping | stopped | failed
    pid: int = field(default_factory=os.getpid)
    query_id: str | None = None
    run_id: str | None = None
    heartbeat: float = field(default_factory=time.time)
    started_at: float = field(default_factory=time.time)
    last_batch_id: int | None = None
    last_batch_at: float | None = None
    input_rows: int = 0
    rows_per_second: float = 0.0
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    latest_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    total_lag: int = 0
    exception: str | None = None
    lag_at: float | None = None  # when latest_offsets (Kafka's end) was last looked up
    source: str | None = None  # Spark's description of the source, e.g. KafkaV2[Subscribe[demo-events]]
    late_routed_total: int = 0  # records routed to the dead-letter table as behind the watermark
    late_check: dict[str, Any] | None = None  # the last batch's routed vs Spark's dropped-by-watermark
    late_mismatches: list[dict[str, Any]] = field(default_factory=list)  # batches where they differed
    progress: dict[str, Any] = field(default_factory=dict)  # rewind.driver.progress_metrics: rates, watermark...
    spark_ui: str | None = None  # the driver's Spark UI (linked from the Rewind page)
    epoch: int | None = None  # the driver lease's epoch this driver writes under (rewind.control.lease)
    host: str = field(default_factory=socket.gethostname)
    holder: dict[str, Any] = field(default_factory=dict)  # the lease Holder: where ``pid`` can be checked
    cluster: dict[str, str] = field(default_factory=dict)  # a driver YARN runs: its application (cluster_identity)
    startup: dict[str, float] = field(default_factory=dict)  # seconds per start-up step (rewind.driver.startup)


class StatusChannel(Protocol):
    """Where a running driver's status goes: ``write`` the status, ``sample`` a history point."""

    def write(self, status: StreamStatus) -> None: ...

    def sample(self, status: StreamStatus) -> None: ...


class FileChannel:
    """The status as a file (and its history as a JSON-lines file beside it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, status: StreamStatus) -> None:
        write_status(self.path, status)

    def sample(self, status: StreamStatus) -> None:
        append_history(self.path, status)


def channel_of(target: Path | StatusChannel) -> StatusChannel:
    return FileChannel(target) if isinstance(target, (str, Path)) else target


def lag_of(end: dict[str, dict[str, int]], latest: dict[str, dict[str, int]]) -> dict[str, int]:
    """Records behind per ``topic/partition`` (never negative)."""
    out: dict[str, int] = {}
    for topic, parts in latest.items():
        for part, hi in parts.items():
            done = end.get(topic, {}).get(part, 0)
            out[f"{topic}/{part}"] = max(0, int(hi) - int(done))
    return out


_WRITE_LOCK = threading.Lock()  # the listener and the lag probe write from different threads


def write_status(path: Path, status: StreamStatus) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _WRITE_LOCK:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(asdict(status), indent=1, default=str))
        os.replace(tmp, path)


#: How far back the throughput/lag history goes (the UI's chart shows the last hour).
HISTORY_KEEP_S = 3600.0
_HISTORY_MAX_BYTES = 256 * 1024  # about 3,000 samples; past it the file is rewritten with the last hour


def append_history(status_file: Path, status: StreamStatus, now: float | None = None,
                   keep_s: float = HISTORY_KEEP_S, max_bytes: int = _HISTORY_MAX_BYTES) -> None:
    """Append ``{"t", "batch", "rows", "lag"}`` (rows: the driver's running count of records read).

    Additive and best effort: a failure here never disturbs the stream. When the file outgrows
    ``max_bytes`` it is rewritten (atomically) with the samples of the last ``keep_s`` seconds.
    """
    now = time.time() if now is None else now
    path = history_path(status_file)
    line = json.dumps({"t": round(now, 3), "batch": status.last_batch_id, "rows": status.input_rows,
                       "lag": status.total_lag, "pid": status.pid}) + "\n"
    try:
        with _WRITE_LOCK:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(line)
            if path.stat().st_size > max_bytes:
                keep = [s for s in read_history(status_file) if s["t"] >= now - keep_s]
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text("".join(json.dumps(s) + "\n" for s in keep))
                os.replace(tmp, path)
    except OSError:
        pass


def read_history(status_file: Path, since: float | None = None) -> list[dict[str, Any]]:
    """The samples :func:`append_history` wrote (oldest first), skipping unreadable lines."""
    out: list[dict[str, Any]] = []
    try:
        text = history_path(status_file).read_text()
    except OSError:
        return out
    for raw in text.splitlines():
        try:
            sample = json.loads(raw)
            if isinstance(sample, dict) and isinstance(sample.get("t"), (int, float)) \
                    and (since is None or sample["t"] >= since):
                out.append(sample)
        except ValueError:
            continue
    return out


def read_status(path: Path) -> StreamStatus | None:
    try:
        return status_from(json.loads(Path(path).read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def status_from(raw: Any) -> StreamStatus | None:
    """A status from its stored document (fields of other versions ignored); None when it is none."""
    known = StreamStatus.__dataclass_fields__
    try:
        return StreamStatus(**{k: v for k, v in raw.items() if k in known})
    except (TypeError, AttributeError):
        return None


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _offset_span(start: Any, end: Any) -> int:
    """Offsets covered by one batch (records, plus transaction markers where there are any)."""
    a, b = _offsets(start), _offsets(end)
    return sum(max(0, int(o) - int(a.get(t, {}).get(p, 0))) for t, parts in b.items() for p, o in parts.items())


def make_listener(target: Path | StatusChannel, status: StreamStatus, on_progress: Any = None):
    """A StreamingQueryListener that keeps the status current in ``target`` (a file or a channel;
    imported lazily: needs pyspark); ``on_progress(progress)`` runs before each progress is written
    (it may update ``status``)."""
    from pyspark.sql.streaming import StreamingQueryListener

    channel = channel_of(target)

    class StatusListener(StreamingQueryListener):
        delivered_batch: int | None = None  # the last batch whose progress this listener has written

        @property
        def _jlistener(self) -> Any:  # PySpark's hook: the JVM object that ``addListener`` registers
            if not hasattr(self, "_jlistenerobj"):
                self._jlistenerobj = json_progress_listener(self)
            return self._jlistenerobj

        def onQueryStarted(self, event: Any) -> None:
            status.query_id, status.run_id = str(event.id), str(event.runId)
            status.state, status.heartbeat = "running", time.time()
            channel.write(status)

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            status.heartbeat = time.time()
            if on_progress is not None:
                try:
                    on_progress(p)
                except Exception:  # noqa: BLE001 - a check must never stop the status from moving
                    logging.getLogger(__name__).exception("progress hook failed")
            if p.batchId != status.last_batch_id or status.last_batch_at is None:
                status.last_batch_at = time.time()  # progress = a new batch id, not a repeated idle report
            status.last_batch_id = p.batchId
            # numInputRows counts every scan of the source (a plan with three branches over one
            # source reports 3x), so records are counted from the offsets the batch covered.
            status.input_rows += _offset_span(p.sources[0].startOffset, p.sources[0].endOffset) \
                if p.sources else int(p.numInputRows)
            status.rows_per_second = float(p.processedRowsPerSecond or 0.0)
            if p.sources:
                src = p.sources[0]
                status.source = src.description
                status.end_offsets = _offsets(src.endOffset)
                latest = _offsets(getattr(src, "latestOffset", None))
                if latest:
                    status.latest_offsets = latest
                status.lag = lag_of(status.end_offsets, status.latest_offsets or status.end_offsets)
                status.total_lag = sum(status.lag.values())
            channel.write(status)
            channel.sample(status)
            self.delivered_batch = p.batchId

        def onQueryIdle(self, event: Any) -> None:
            status.heartbeat = time.time()
            channel.write(status)

        def onQueryTerminated(self, event: Any) -> None:
            status.heartbeat = time.time()
            status.exception = event.exception
            status.state = "failed" if event.exception else "stopped"
            channel.write(status)

    return StatusListener()


def json_progress_listener(listener: Any) -> Any:
    """The JVM side of ``listener`` with each batch's progress read as its JSON, in one call.

    Why: PySpark builds a ``StreamingQueryProgress`` from the Java object field by field (about a hundred
    py4j calls a batch), and each Java map it copies ends its iteration with an exception that PySpark
    converts by looking up eight exception classes, each lookup a search of the whole class path. On a
    demo stream's driver that was a quarter of the JVM's CPU samples (the listener bus thread, mostly
    ``ZipFile`` lookups: JFR, 2026-11-29). ``StreamingQueryProgress.fromJson`` (what Spark Connect uses)
    builds the same object from the progress's own JSON."""
    from pyspark import SparkContext
    from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

    class JsonProgress(JStreamingQueryListener):
        def onQueryProgress(self, jevent: Any) -> None:
            progress = json.loads(jevent.progress().json())
            self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))

    return SparkContext._jvm.PythonStreamingQueryListenerWrapper(JsonProgress(listener))  # type: ignore[union-attr]


def await_last_progress(query: Any, listener: Any, timeout: float) -> bool:
    """Wait, at most ``timeout`` seconds, until ``listener`` has written the progress of the query's
    last executed batch.

    Spark hands progress events to listeners on its own bus thread, after the query has moved on: a
    driver that stops at once would write "stopped" with the batch before the last one and end while
    the last one's callback runs. Only progress with an ``addBatch`` duration counts: an idle
    trigger's progress (the next batch id, no batch run) is kept in ``recentProgress`` but reaches
    listeners as ``onQueryIdle``, never as progress. False: timed out (or the query cannot say)."""
    try:
        executed = [p.batchId for p in query.recentProgress if "addBatch" in (p.durationMs or {})]
    except Exception:  # noqa: BLE001 - a JVM already gone has nothing more to deliver
        return False
    if not executed:
        return True
    last = executed[-1]
    deadline = time.monotonic() + timeout
    while listener.delivered_batch is None or listener.delivered_batch < last:
        if time.monotonic() >= deadline:
            logging.getLogger(__name__).warning("the progress of batch %s was not delivered within %.0fs: the "
                                                "status may show the batch before it", last, timeout)
            return False
        time.sleep(0.05)
    return True
