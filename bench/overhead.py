"""What Rewind costs over the Spark job a team would write without it: one topic, one transform, timed side by
side in one run. Prints one JSON object.

Each run is a process of its own, started cold the same way (so no run profits from another's warm JVM), over
the whole topic as a backlog (``availableNow``), on its own checkpoint and sink:

- ``rewind``: the stream run by Rewind, ``rewind stream run NAME --available-now`` (lease, status, ledger,
  late-record routing: everything a stream's driver does);
- ``plain_spark``: the same plan as a plain PySpark job with a careful ``foreachBatch`` into SQLite
  (``bench/plain_job.py``), Spark's defaults;
- ``plain_rewind_settings``: the same plain job with the settings Rewind gives every stream
  (``rewind.driver.spark_conf``);
- ``noop``: the same plan into Spark's ``noop`` sink, with Rewind's settings: Spark's floor;
- ``raw_consumer``: a confluent-kafka consumer reading the topic (no Spark at all).

A Spark run's time is its processing span, read from its checkpoint: from the first offset-log entry
(its first batch planned) to the last commit-log entry (its last batch committed); start-up (JVM, session,
connector) is left out of every run alike, and reported apart (``wall_s``). Runs rotate their order
between repetitions; a figure is the median over the repetitions. Every Spark run's table row counts are
reported, so a run that wrote less cannot look faster.

``--latency``: instead, each of ``rewind``, ``rewind_quiet`` (its driver's Spark UI and event log off),
``plain_rewind_settings`` and ``plain_spark`` runs with trigger 0
(a batch as soon as the last ends) on a topic of its own while a producer sends ``--rate`` demo events/s for
``--seconds`` (after a warm-up of 2,000 records the run must have written first); a poller reads the sink's
new event rows every 20 ms and takes, for each, the time it became visible minus its Kafka timestamp (the
broker's append time). p50/p95/p99 over the records sent after the first 10 s and before the last 2 s (the
batch after the producer stops is left out), and from the checkpoint's files the median batch span (offset
log to commit log) and gap between batches. The demo transform only.

Everything but the JSON goes to ``<work>/bench.log``; each run's own output to ``<work>/<run>-<rep>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import broker_description, keep_stdout_for_json  # noqa: E402

RUNS = ("rewind", "plain_rewind_settings", "plain_spark", "noop")
#: --latency runs: ``rewind_quiet`` is the Rewind stream with its driver's Spark UI turned off too (as the plain
#: job's is), ``rewind_event_log`` with Spark's event log on (off by default; the registry's spark_conf): their
#: share of the latency apart from the rest of the driver's work. ``source_reads`` needs the event log.
LATENCY_RUNS = ("rewind", "rewind_quiet", "rewind_event_log", "plain_rewind_settings", "plain_spark")
QUIET = {"rewind_quiet": '{spark.ui.enabled: "false"}',
         "rewind_event_log": '{spark.eventLog.enabled: "true"}'}
#: The demo (parse, deduplicate, window totals: stateful) and the inventory stream (parse, route, a broadcast
#: join with a static catalog: stateless).
TRANSFORMS = {"demo": "rewind.demo.transform:DemoTransform",
              "inventory": "rewind.inventory.transform:InventoryTransform"}


def processing_span(checkpoint: Path) -> tuple[float, int]:
    """Seconds from the first offset-log entry to the last commit-log entry of ``checkpoint``."""
    offsets = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    first = min(offsets, key=lambda p: int(p.name))
    last = max(commits, key=lambda p: int(p.name))
    return last.stat().st_mtime - first.stat().st_mtime, len(commits)


def batch_timings(checkpoint: Path, lo: float, hi: float) -> dict[str, Any]:
    """Medians over the batches planned between epoch seconds ``lo`` and ``hi``: a batch's span (its offset-log
    entry written to its commit-log entry written) and the gap after it (its commit to the next batch's
    offset-log entry), from the files' mtimes; where a run's batch time goes, read alike for every run."""
    def mtimes(folder: str) -> dict[int, float]:
        d = checkpoint / folder
        return {int(f.name): f.stat().st_mtime for f in d.iterdir() if f.name.isdigit()} if d.is_dir() else {}

    offsets, commits = mtimes("offsets"), mtimes("commits")
    spans = [commits[b] - t for b, t in offsets.items() if b in commits and lo <= t <= hi]
    gaps = [offsets[b + 1] - commits[b] for b, t in offsets.items()
            if b in commits and b + 1 in offsets and lo <= t <= hi]
    return {"batches": len(spans), "span_s_p50": round(statistics.median(spans), 3) if spans else None,
            "gap_s_p50": round(statistics.median(gaps), 4) if gaps else None}


def source_reads(checkpoint: Path) -> dict[str, Any] | None:
    """From the driver's event log beside the checkpoint (``rewind_event_log`` runs write one): per batch,
    Spark's ``numInputRows`` against the batch's offsets (end minus start); equal when every record is read
    once per batch. None without an event log."""
    import io

    import zstandard

    files = sorted(Path(f"{checkpoint}.eventlog").glob("*/events_*"))
    if not files:
        return None
    rows: list[tuple[int, int, int]] = []
    for f in files:
        raw = f.read_bytes()
        text = (zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True).read()
                if f.name.endswith(".zstd") else raw).decode(errors="replace")
        for line in text.splitlines():
            if "QueryProgressEvent" not in line:
                continue
            progress = json.loads(line)["progress"]
            for src in progress["sources"]:
                start, end = (json.loads(x) if isinstance(x, str) else x
                              for x in (src.get("startOffset"), src.get("endOffset")))
                if isinstance(start, dict) and isinstance(end, dict):
                    span = sum(int(o) - int(start.get(t, {}).get(p, 0)) for t, parts in end.items()
                               for p, o in parts.items())
                    rows.append((int(progress["batchId"]), int(src["numInputRows"]), span))
    return {"batches": len(rows), "input_rows": sum(r[1] for r in rows), "offsets": sum(r[2] for r in rows),
            "batches_reading_more": [r[0] for r in rows if r[1] > r[2]]}


def table_rows(db: Path, prefix: str = "") -> dict[str, int]:
    with sqlite3.connect(db) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n.removeprefix(prefix): int(con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0])
                for n in names if n.startswith(prefix) and not n.startswith(f"{prefix}rewind_") and n != "batches"}


def run_process(argv: list[str], log: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    with open(log, "ab") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False).returncode
    if code != 0:
        raise RuntimeError(f"{argv[:4]} exited {code}: see {log}")
    return time.perf_counter() - started


def one_run(kind: str, rep: int, work: Path, args: argparse.Namespace, bootstrap: str, registry: Path,
            env: dict[str, str]) -> dict[str, Any]:
    name = f"{kind}_{rep}"
    log = work / f"{name}.log"
    if kind == "rewind":
        argv = [sys.executable, "-m", "rewind.cli", "stream", "run", name, "--registry", str(registry),
                "--bootstrap", bootstrap, "--available-now"]
        checkpoint, db, prefix = work / "checkpoints" / name, work / f"sink-{name}.db", f"{name}_"
    else:
        checkpoint, db, prefix = work / "checkpoints" / name, work / f"sink-{name}.db", ""
        argv = [sys.executable, str(ROOT / "bench" / "plain_job.py"), "--bootstrap", bootstrap, "--topic",
                args.topic, "--checkpoint", str(checkpoint), "--db", str(db), "--max-offsets",
                str(args.max_offsets_per_trigger), "--settings", "spark" if kind == "plain_spark" else "rewind",
                "--sink", "noop" if kind == "noop" else "sqlite", "--transform", TRANSFORMS[args.transform],
                "--stream-spec", str(registry)]
    wall = run_process(argv, log, env)
    span, batches = processing_span(checkpoint)
    out = {"run": kind, "repetition": rep, "wall_s": round(wall, 2), "processing_s": round(span, 2),
           "events_per_s": round(args.records_in_topic / span), "batches": batches}
    if kind != "noop":
        out["rows"] = table_rows(db, prefix)
    return out


class VisibilityPoller:
    """Reads the sink's new event rows every ``every`` seconds: for each, (Kafka timestamp, seen at)."""

    def __init__(self, db: Path, table: str, every: float = 0.02) -> None:
        import threading

        self.db, self.table, self.every = db, table, every
        self.seen: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import pandas as pd

        last = 0
        while not self.stop.is_set():
            try:
                with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1) as con:
                    rows = con.execute(f'SELECT rowid, kafka_timestamp, event_id FROM "{self.table}" '
                                       "WHERE rowid > ? ORDER BY rowid", (last,)).fetchall()
            except sqlite3.Error:
                rows = []  # not created yet, or locked for a moment: the next look
            now = time.time()
            if rows:
                last = rows[-1][0]
                stamps = pd.to_datetime([r[1] for r in rows if str(r[2]).startswith("lat")], utc=True, format="mixed")
                self.seen += [(s.timestamp(), now) for s in stamps]
            self.stop.wait(self.every)


def latency_run(kind: str, work: Path, args: argparse.Namespace, bootstrap: str, env: dict[str, str]
                ) -> dict[str, Any]:
    """One run of ``kind`` with trigger 0 under a steady producer (see the module docstring)."""
    import signal

    from latency import SteadyProducer, create_topic, percentiles

    from rewind.demo.producer import ProduceSpec, produce
    from tests.harness.registry_templates import demo_stream, write_registry

    name, topic = f"lat_{kind}", f"lat-{kind}-{work.name}"
    work.mkdir(parents=True, exist_ok=True)
    create_topic(bootstrap, topic, args.partitions)
    quiet = {"spark_conf": QUIET[kind]} if kind in QUIET else {}
    registry = write_registry(work / f"{name}.yaml", demo_stream(
        name, topic, work, max_offsets=args.max_offsets_per_trigger, trigger='"0 seconds"',
        savepoints="{schedule: null}", **quiet))
    checkpoint, db = work / "checkpoints" / name, work / f"sink-{name}.db"
    if kind.startswith("rewind"):
        argv = [sys.executable, "-m", "rewind.cli", "stream", "run", name, "--registry", str(registry),
                "--bootstrap", bootstrap]
        table = f"{name}_events"
    else:
        argv = [sys.executable, str(ROOT / "bench" / "plain_job.py"), "--bootstrap", bootstrap, "--topic", topic,
                "--checkpoint", str(checkpoint), "--db", str(db), "--max-offsets", str(args.max_offsets_per_trigger),
                "--settings", "spark" if kind == "plain_spark" else "rewind", "--stream-spec", str(registry),
                "--continuous"]
        table = "events"
    log = open(work / f"{name}.log", "ab")  # noqa: SIM115 - open while the process runs
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    poller = VisibilityPoller(db, table)
    try:
        produce(bootstrap, ProduceSpec(topic=topic, count=2000, partitions=args.partitions, id_prefix="warm"))
        prefix = f"{name}_" if kind.startswith("rewind") else ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (db.exists() and table_rows(db, prefix).get("events", 0) >= 2000):
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} ended during its warm-up: see {log.name}")
            time.sleep(0.5)
        poller.thread.start()
        producer = SteadyProducer(bootstrap, topic, args.rate, args.seconds, "lat")
        producer.start()
        producer.join()
        time.sleep(5.0)
    finally:
        poller.stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    lo, hi = producer.start_epoch + 10.0, producer.end_epoch - 2.0
    kept = [seen - ts for ts, seen in poller.seen if lo <= ts <= hi]
    return {"run": kind, "records_measured": len(kept), "producer": producer.report(),
            "latency_s": percentiles(kept), "batches": batch_timings(checkpoint, lo, hi),
            "source_reads": source_reads(checkpoint)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--transform", choices=sorted(TRANSFORMS), default="demo")
    ap.add_argument("--runs", default="", help=f"which of {', '.join(RUNS)} (--latency: {', '.join(LATENCY_RUNS)}); "
                    "default all")
    ap.add_argument("--latency", action="store_true", help="latency under a steady producer instead (see above)")
    ap.add_argument("--rate", type=int, default=1000, help="--latency: events per second")
    ap.add_argument("--seconds", type=float, default=60.0, help="--latency: how long the producer sends")
    args = ap.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()] if args.runs else \
        list(LATENCY_RUNS if args.latency else RUNS)
    allowed = LATENCY_RUNS if args.latency else RUNS
    if set(runs) - set(allowed) or args.repeat < 1:
        ap.error(f"--runs takes names among {', '.join(allowed)}; --repeat must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="rewind-overhead-"))
    out = keep_stdout_for_json(work / "bench.log")
    load_start = round(os.getloadavg()[0], 2)

    from throughput import raw_consumer_eps

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.inventory.producer import produce_inventory
    from tests.harness.registry_templates import demo_stream, inventory_stream, write_registry

    if args.latency:
        with EmbeddedPlatform(work / "services") as plat:
            info = plat.info()
            env = {**os.environ, **info.env(), "REWIND_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
            measured = []
            for rep in range(1, args.repeat + 1):  # the order rotates, as the throughput runs do
                turn = runs[(rep - 1) % len(runs):] + runs[:(rep - 1) % len(runs)]
                measured += [{**latency_run(kind, work / f"rep{rep}", args, info.kafka_bootstrap, env),
                              "repetition": rep} for kind in turn]
        summary = {kind: {q: round(statistics.median(r["latency_s"][q] for r in measured if r["run"] == kind), 3)
                          for q in ("p50", "p95", "p99")} for kind in runs}
        print(json.dumps({"benchmark": "overhead_latency", "rate": args.rate, "seconds": args.seconds,
                          "partitions": args.partitions, "trigger": "0 seconds", "repeat": args.repeat,
                          "median_of_repetitions": summary, "runs": measured,
                          "machine": {"cores": os.cpu_count(), "load_avg_1m_at_start": load_start,
                                      "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
                          "log": str(work / "bench.log")}), file=out, flush=True)
        return
    args.topic = "overhead-events"
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in [*runs, "raw_consumer"]}
    order: list[list[str]] = []
    with EmbeddedPlatform(work / "services") as plat:
        info = plat.info()
        env = {**os.environ, **info.env(), "REWIND_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
        if args.transform == "demo":
            produce(info.kafka_bootstrap, ProduceSpec(topic=args.topic, count=args.events,
                                                      partitions=args.partitions, id_prefix="ovh"))
        else:
            produce_inventory(info.kafka_bootstrap, args.topic, args.events, args.partitions)
        entry = demo_stream if args.transform == "demo" else inventory_stream
        entries = [entry(f"rewind_{rep}", args.topic, work, max_offsets=args.max_offsets_per_trigger,
                         savepoints="{schedule: null}") for rep in range(1, args.repeat + 1)]
        registry = write_registry(work / "streams.yaml", *entries)
        for rep in range(1, args.repeat + 1):
            n, seconds = raw_consumer_eps(info.kafka_bootstrap, args.topic)
            args.records_in_topic = n
            results["raw_consumer"].append({"repetition": rep, "records": n, "seconds": round(seconds, 2),
                                            "events_per_s": round(n / seconds)})
            turn = runs[(rep - 1) % len(runs):] + runs[:(rep - 1) % len(runs)]
            order.append(turn)
            for kind in turn:
                results[kind].append(one_run(kind, rep, work, args, info.kafka_bootstrap, registry, env))

    def median(kind: str) -> float:
        return float(statistics.median(r["events_per_s"] for r in results[kind]))

    summary = {kind: {"events_per_s": round(median(kind)), "runs": results[kind]} for kind in results}
    for kind in runs:
        summary[kind]["ratio_to_raw"] = round(median(kind) / median("raw_consumer"), 3)
    if "rewind" in runs:
        for ref in ("plain_spark", "plain_rewind_settings", "noop"):
            if ref in runs:
                summary["rewind"][f"ratio_to_{ref}"] = round(median("rewind") / median(ref), 3)
    result = {"benchmark": "overhead", "transform": TRANSFORMS[args.transform], "events": args.events,
              "records_in_topic": args.records_in_topic, "partitions": args.partitions,
              "max_offsets_per_trigger": args.max_offsets_per_trigger, "repeat": args.repeat, "order": order,
              "settings": {"plain_spark": "Spark's defaults, local[2], 2 shuffle partitions",
                           "rewind, plain_rewind_settings, noop": "rewind.driver.spark_conf DEFAULTS and REQUIRED, "
                                                                  "kafka.isolation.level read_committed"},
              "machine": {"cores": os.cpu_count(), "kafka": broker_description(),
                          "load_avg_1m_at_start": load_start, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
              "runs": summary, "log": str(work / "bench.log")}
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
