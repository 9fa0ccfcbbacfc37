"""Proof time and peak memory against the size of the topic: a bounded proof stays flat.

Prints one JSON object. For each topic size (default 100k, 1M and 5M records of the demo's
events, with malformed records and duplicate sends) on the embedded Apache Kafka: the sink is
filled the way a correct stream fills it, from the transform's own ``expect()`` (the bench is
about the proof, not the stream), then a *fixed* range (the last ``--range`` records) is proven
with the contract proof from a cursor (``rewind verify --since-last-proof``), in a fresh process
whose wall time and peak RSS are measured. Reference in the same run: the full proof (every
record from the beginning) of the same topic, for sizes up to ``--full-up-to``; it grows with
the topic, the bounded one should not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import broker_description, keep_stdout_for_json  # noqa: E402

PARTITIONS = 4


def fill(spec: Any, bootstrap: str, ends: dict[tuple[str, int], int], step: int = 250_000) -> float:
    """Write the events and dead letters a correct stream would, a slice of offsets at a time."""
    from rewind.api.contract import load_transform
    from rewind.driver.runner import open_sink
    from rewind.proof.contract_proof import expected_frame, records_frame
    from rewind.proof.verify import read_records

    t0 = time.perf_counter()
    transform = load_transform(spec)
    sink = open_sink(spec)
    try:
        for lo in range(0, max(ends.values()), step):
            records = read_records(bootstrap, spec.topics, source_options=spec.source.options,
                                   lower={k: lo for k in ends}, upper={k: min(e, lo + step) for k, e in ends.items()})
            exp = expected_frame(transform, records_frame(records), spec)
            valid = exp[exp["reason"].isna()].drop_duplicates("event_id")
            sink.write_rows({"events": valid[["event_id", "key", "amount", "event_time", "topic", "partition",
                                              "offset"]],
                             "dead_letter": exp[exp["reason"].notna()][["topic", "partition", "offset", "reason"]]},
                            replay_id="bench-fill")
    finally:
        sink.dispose()
    return time.perf_counter() - t0


def prove_in_child(registry: Path, stream: str, mode: str, bootstrap: str) -> dict[str, Any]:
    """One proof in a fresh interpreter: its wall time, peak RSS and what it judged.

    Peak RSS is the child's own ``VmHWM`` (reset at exec): ``ru_maxrss`` would count the pages the
    child shared with this (large) process between fork and exec."""
    code = (
        "import json, resource, sys, time\n"
        "from rewind.registry import load_registry\n"
        "from rewind.proof.contract_proof import verify_contract_stream\n"
        f"spec = load_registry({str(registry)!r}).get({stream!r})\n"
        "t = time.perf_counter()\n"
        f"rep = verify_contract_stream(spec, {bootstrap!r}, since={'None' if mode == 'full' else repr('cursor')})\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "peak = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'seconds': time.perf_counter() - t, 'ok': rep.ok,\n"
        "                  'peak_rss_kb': peak,\n"
        "                  'records_in_range': rep.counts['records_in_range']}))\n")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    seconds, peak_kb = doc.pop("seconds"), doc.pop("peak_rss_kb")
    return {**doc, "process_seconds": round(wall, 2), "proof_seconds": round(seconds, 2),
            "peak_rss_mb": round(peak_kb / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000,5000000", help="records in the topic (comma-separated)")
    ap.add_argument("--range", type=int, default=100_000, help="records the bounded proof proves")
    ap.add_argument("--full-up-to", type=int, default=1_000_000, help="largest size also proven in full")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-proof-"))
    out = keep_stdout_for_json(work / "bench.log")

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.embedded.services import EmbeddedPlatform
    from rewind.kafka.lookups import true_end_offsets
    from rewind.proof.cursor import write_cursor
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    names = {n: f"p{n}" for n in sizes}
    registry = write_registry(work / "streams.yaml", *(demo_stream(names[n], f"bench-proof-{n}", work,
                                                                   dq_suite="contract") for n in sizes))
    reg = load_registry(registry)
    results = []
    with EmbeddedPlatform(work / "services") as plat:
        bootstrap = plat.info().kafka_bootstrap
        setups = {}
        for n in sizes:
            spec = reg.get(names[n])
            t = time.perf_counter()
            produce(bootstrap, ProduceSpec(topic=spec.topics[0], count=n, partitions=PARTITIONS, malformed_every=97,
                                           duplicate_every=53, keyless=True))
            produce_s = time.perf_counter() - t
            ends = {(tp.topic, tp.partition): o for tp, o in true_end_offsets(bootstrap, spec.topics).items()}
            fill_s = fill(spec, bootstrap, ends)
            per = args.range // len(ends)
            write_cursor(spec, {k: (0, max(0, e - per)) for k, e in ends.items()}, "bench-setup")
            setups[n] = {"records": sum(ends.values()), "produce_seconds": round(produce_s, 1),
                         "fill_seconds": round(fill_s, 1)}
        for n in sizes:
            results.append({"topic_records": n, **setups[n],
                            "bounded": prove_in_child(registry, names[n], "bounded", bootstrap)})
        full = []
        for n in [s for s in sizes if s <= args.full_up_to]:
            full.append({"topic_records": n, "full": prove_in_child(registry, names[n], "full", bootstrap)})
    bounded = [r["bounded"] for r in results]
    doc = {"bench": "proof_scaling", "broker": broker_description(), "cpus": os.cpu_count(),
           "range_records": args.range, "sizes": results, "reference_full_proof": full,
           "bounded_seconds_ratio_largest_to_smallest": round(bounded[-1]["proof_seconds"]
                                                               / max(bounded[0]["proof_seconds"], 1e-9), 2),
           "bounded_rss_ratio_largest_to_smallest": round(bounded[-1]["peak_rss_mb"]
                                                           / max(bounded[0]["peak_rss_mb"], 1e-9), 2),
           "all_ok": all(b["ok"] for b in bounded) and all(f["full"]["ok"] for f in full), "work": str(work)}
    print(json.dumps(doc, indent=1), file=out)
    out.flush()


if __name__ == "__main__":
    main()
