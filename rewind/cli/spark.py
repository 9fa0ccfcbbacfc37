"""`rewind spark share-classes`: the class-data archive Spark drivers on this machine start from
(``rewind.runtime.class_sharing``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rewind.cli.common import command


def add_parser(sub: Any) -> None:
    s = command(sub, "spark", "the class-data archive that makes the Spark drivers Rewind starts on this machine "
                              "start faster",
                "share-classes: run a short local Spark job whose JVM writes an archive of the classes a stream "
                "driver loads (about 40 s of CPU, once per JDK and Spark installation; into "
                "$REWIND_JVM_CACHE/cds/); the drivers Rewind starts on this machine map it from then on "
                "(REWIND_CLASS_SHARING=off: they do not). Run it where drivers start: each Airflow worker that "
                "launches streams in local or client mode, or the image they run.",
                codes={1: "the archive's job failed (nothing written)"})
    s.add_argument("action", choices=["share-classes"])
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from rewind.runtime.class_sharing import archive, build  # lazy: start-up of the CLI

    path = archive()
    started = time.monotonic()
    existed = path.exists()
    if not existed:
        build()
    seconds, size = round(time.monotonic() - started, 1), path.stat().st_size
    if args.json:
        print(json.dumps({"archive": str(path), "built": not existed, "seconds": seconds, "bytes": size}))
    else:
        done = f"built in {seconds} s" if not existed else "already there"
        print(f"{done}: {path} ({size // 2 ** 20} MB); the Spark drivers Rewind starts on this machine map it")
    return 0
