"""Where a driver's start-up goes: one span per step, from its process's start to its first committed batch.

Recovery is measured from a SIGKILL to the next committed batch (``bench/recovery.py``); most of it is the
new driver starting. The spans say which step took the time: under spark-submit the JVM starts first and
starts Python (``jvm``), then Python imports Rewind, PySpark and pandas (``python``), checks the transform
and the source (``checks``), takes the lease (``lease``), starts the Spark session (``session``), opens the
sink and the checkpoint and starts the query (``query``), and runs the first batch (``first_batch``: the
query's start to the first batch's progress, which Spark reports after the sink committed it).

Logged as one line when the first batch is in, and kept in the status (``startup``). The process start
times come from the kernel (``psutil``), so nothing has to be passed from the launcher.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psutil

__all__ = ["StartupSpans", "process_start"]


def process_start() -> tuple[float, float | None]:
    """(this process's start, its spark-submit JVM's start or None) in epoch seconds. Under spark-submit
    the Python driver is a child of the JVM that runs ``org.apache.spark.deploy.SparkSubmit``."""
    me = psutil.Process()
    started = me.create_time()
    try:
        parent = me.parent()
        if parent is not None and "org.apache.spark.deploy.SparkSubmit" in " ".join(parent.cmdline()):
            return started, parent.create_time()
    except (psutil.Error, OSError):
        pass
    return started, None


@dataclass
class StartupSpans:
    """Marks in the order the steps end; ``spans`` turns them into seconds per step."""

    python_start: float
    jvm_start: float | None = None
    marks: list[tuple[str, float]] = field(default_factory=list)

    @classmethod
    def now(cls) -> StartupSpans:
        python_start, jvm_start = process_start()
        return cls(python_start, jvm_start)

    def mark(self, step: str, at: float | None = None) -> None:
        self.marks.append((step, time.time() if at is None else at))

    def spans(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.jvm_start is not None:
            out["jvm"] = round(self.python_start - self.jvm_start, 3)
        last = self.python_start
        for step, at in self.marks:
            out[step] = round(at - last, 3)
            last = at
        return out

    def total(self) -> float:
        end = self.marks[-1][1] if self.marks else self.python_start
        return round(end - (self.jvm_start or self.python_start), 3)

    def line(self, stream: str) -> str:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in self.spans().items())
        since = "its spark-submit JVM started" if self.jvm_start is not None else "its process started"
        return f"stream {stream}: first batch in {self.total():.2f}s since {since} ({steps})"
