"""Checkpoint inspection time at 10 batches vs a long history (default 2,000 batches), same run.

Prints one JSON object. Both checkpoints are written by a real stateful query with a short
trigger (tests.harness.checkpoint_history.generate_checkpoint) with every batch retained; each is then
inspected ``--runs`` times, interleaved, and the medians are compared with the target: the long
history may cost at most 2x the short one. Spark start-up and generation are reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewind.checkpoints.inspection import inspect_checkpoint  # noqa: E402
from tests.harness.checkpoint_history import generate_checkpoint, time_calls  # noqa: E402

TARGET_RATIO = 2.0
SMALL = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=2000, help="batches in the long checkpoint")
    ap.add_argument("--runs", type=int, default=31, help="timed inspections per checkpoint (median)")
    ap.add_argument("--recent", type=int, default=10, help="inspect_checkpoint's window")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints (the path is in the JSON)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rewind-bench-inspect-"))
    from rewind.driver.spark_session import build_session

    t0 = time.perf_counter()
    spark = build_session("rewind-bench-inspect")
    startup_s = time.perf_counter() - t0
    try:
        small = generate_checkpoint(spark, work / "small", SMALL)
        large = generate_checkpoint(spark, work / "large", args.batches)
    finally:
        spark.stop()
    try:
        small_s, large_s = time_calls([lambda: inspect_checkpoint(work / "small", recent=args.recent),
                                       lambda: inspect_checkpoint(work / "large", recent=args.recent)], args.runs)
        med_small, med_large = statistics.median(small_s), statistics.median(large_s)
        ratio = med_large / med_small
        result = {
            "bench": "checkpoint_inspect", "batches_small": SMALL, "batches_large": args.batches,
            "batches_committed_small": small["batches_committed"],
            "batches_committed_large": large["batches_committed"],
            "files_large": large["files"]["total"], "runs": args.runs, "recent": args.recent,
            "median_s_small": round(med_small, 6), "median_s_large": round(med_large, 6),
            "min_s_small": round(min(small_s), 6), "min_s_large": round(min(large_s), 6),
            "ratio": round(ratio, 2), "target_ratio": TARGET_RATIO, "meets_target": ratio <= TARGET_RATIO,
            "generation_s": round(large["seconds"] + large["drain_s"], 2),
            "generation_batches_per_s": large["batches_per_s"], "generation_s_small": round(small["seconds"], 2),
            "spark_startup_s": round(startup_s, 2),
            "machine": {"cores": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                        "spark_master": os.environ.get("REWIND_SPARK_MASTER", "local[2]")},
        }
        if args.keep:
            result["work_dir"] = str(work)
        print(json.dumps(result))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
