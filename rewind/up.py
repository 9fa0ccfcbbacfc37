"""`make up`: the embedded platform, the demo producer and the demo stream, until Ctrl-C."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from rewind.registry import load_registry
from rewind.services import EmbeddedPlatform, ManagedProcess
from rewind.status import read_status, status_path

ROOT = Path(__file__).resolve().parents[1]


def run_up(home: Path, registry: str | None, stream: str, rate: float = 200.0) -> int:
    os.environ["REWIND_HOME"] = str(home)
    spec = load_registry(registry).get(stream)  # refuse a bad registry before anything starts
    platform = EmbeddedPlatform(home / "services")
    children: list[ManagedProcess] = []
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"starting the embedded platform in {home} ...", flush=True)
    info = platform.start()
    env = {**info.env(), "REWIND_HOME": str(home), "PYTHONPATH": str(ROOT)}
    os.environ.update(env)
    try:
        py = sys.executable
        producer = ManagedProcess("producer", [py, "-m", "rewind.cli", "produce", "--topic", spec.topics[0],
                                               "--count", str(10**9), "--rate", str(rate), "--partitions",
                                               str(spec.partitions), "--malformed-every", "97", "--late-every",
                                               "211", "--duplicate-every", "53", "--id-prefix", "demo"],
                                  home / "logs" / "producer.log", env=env, cwd=ROOT)
        producer.start()
        time.sleep(2)  # the producer creates the topic
        job = ManagedProcess(f"stream-{stream}", [py, str(ROOT / "spark_jobs" / "stream.py"), stream]
                             + (["--registry", registry] if registry else []),
                             home / "logs" / f"stream-{stream}.log", env=env, cwd=ROOT)
        job.start()
        children += [producer, job]
        print(f"""
Rewind is up (embedded default). Ctrl-C stops everything started here.
  Kafka (Tansu)       {info.kafka_bootstrap}      topic {spec.topics[0]} ({spec.partitions} partitions)
  S3 (SeaweedFS)      {info.s3_endpoint}   bucket {info.bucket}; credentials in {home}/services/services.json
  demo producer       {rate:.0f} events/s, malformed 1/97, late 1/211, duplicate 1/53; log {producer.log_path}
  demo stream         checkpoint {spec.checkpoint}; log {job.log_path}
  sink                {spec.sink.url}
  status              {status_path(spec.status_dir, stream)}
  prove exactly-once  .venv/bin/rewind verify {stream}
""", flush=True)
        last = 0.0
        while not stopping:
            time.sleep(0.5)
            if not job.alive() and (job.proc is None or job.proc.returncode != 0):
                # exit 0 is a graceful stop (`savepoint create --stop` stops it and relaunches a new one)
                print(f"the stream exited (code {job.proc.returncode if job.proc else '?'}); see {job.log_path}")
                break
            if time.time() - last >= 10:
                last = time.time()
                st = read_status(status_path(spec.status_dir, stream))
                if st:
                    print(f"  [{time.strftime('%H:%M:%S')}] {stream}: {st.state}, batch {st.last_batch_id}, "
                          f"rows {st.input_rows}, lag {st.total_lag}", flush=True)
        return 0
    finally:
        _say("stopping ...")
        from rewind.stream_control import stop_stream

        try:
            stop_stream(spec, timeout=60)  # the live stream may be one that `savepoint create --stop` relaunched
        except Exception as exc:  # noqa: BLE001 - the teardown goes on
            _say(f"stream stop: {exc}")
        for child in reversed(children):
            child.stop(grace=30.0)
        platform.stop()
        _say("stopped everything that was started.")


def _say(message: str) -> None:
    """Print, but never let a closed stdout (e.g. a pipe whose reader died on Ctrl-C) stop a teardown."""
    try:
        print(message, flush=True)
    except (BrokenPipeError, OSError):
        pass
