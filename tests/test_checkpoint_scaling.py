"""Inspection does not grow with history: the same report, the same files read, about the same time
on real checkpoints with 10 and with 130 batches (2,000 in bench/checkpoint_inspect.py) written by a
stateful query with a short trigger.

Set REWIND_SCALING_BATCHES=2000 to run the size the benchmark uses.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rewind.checkpoints.inspection import CheckpointReport, inspect_checkpoint
from tests.harness.checkpoint_history import generate_checkpoint, time_calls

pytestmark = pytest.mark.slow

SMALL = 10
RECENT = 10  # inspect_checkpoint's default window
# 130 batches (13x the small one, past Spark's default retention of 100; 200 until 2026-11-30, about 15 s more of
# the suite's budget for the same proof): generating 600 took 307 s of a
# CI rehearsal on 2 cores (2026-11-25) and 300 took 206 s of an 84-minute CI run; bench/checkpoint_inspect.py
# measures 2,000 (generating them took 4-10 minutes of CI on a loaded machine). The file-count test
# (the same files opened at 10 and at LARGE batches) proves the independence at any size.
LARGE = int(os.environ.get("REWIND_SCALING_BATCHES", "130"))
RUNS = 21  # timed inspections per checkpoint (median)
# median(large) <= TIME_RATIO * median(small) + TIME_SLACK_S. The slack absorbs jitter only: with
# 0.02 s an inspector that lists and parses every name of a 2,000-batch history (~23 ms against
# ~1.7 ms at 10 batches, 13x) still passed, by 0.5 ms, i.e. depending on the machine's load.
TIME_RATIO = 2.0
TIME_SLACK_S = 0.005


def _show(config: pytest.Config, msg: str) -> None:
    """Print past pytest's capture: the numbers are the point of this module, even when it passes."""
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(msg, flush=True)


@dataclass
class History:
    small: Path
    large: Path
    facts: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
            pytestconfig: pytest.Config) -> History:
    """Two checkpoints of the same stateful query: 10 batches and LARGE batches, all retained."""
    work = tmp_path_factory.mktemp("history")
    facts = {name: generate_checkpoint(spark, work / name, n, timeout_s=800)
             for name, n in (("small", SMALL), ("large", LARGE))}
    for name, f in facts.items():
        _show(pytestconfig, f"\ngenerated {name}: {f['batches_committed']} batches in {f['seconds']} s "
                            f"({f['batches_per_s']} batches/s, drain {f['drain_s']} s), files {f['files']}")
    return History(work / "small", work / "large", facts)


# --- what inspection touches, seen through Python's audit events (independent of how it reads) ---

@dataclass
class Touches:
    root: str
    opened: Counter[str] = field(default_factory=Counter)  # relative path -> opens
    listed: Counter[str] = field(default_factory=Counter)  # relative dir -> listings


_recording: list[Touches] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _recording or event not in ("open", "os.scandir", "os.listdir") or not args:
        return
    target = args[0]
    if isinstance(target, int) or target is None:
        return
    full = os.path.abspath(os.fsdecode(target))
    rec = _recording[-1]
    if full == rec.root or full.startswith(rec.root + os.sep):
        rel = os.path.relpath(full, rec.root)
        (rec.opened if event == "open" else rec.listed)[rel] += 1


sys.addaudithook(_audit)  # process-wide and permanent, so it does nothing unless recording


@contextmanager
def recording(root: Path) -> Iterator[Touches]:
    rec = Touches(os.path.abspath(root))
    _recording.append(rec)
    try:
        yield rec
    finally:
        _recording.remove(rec)


# --- tests ---

def test_history_is_all_on_disk(history: History) -> None:
    """Spark's retention (minBatchesToRetain, RocksDB cleanup) did not delete old batches."""
    for name, want in (("small", SMALL), ("large", LARGE)):
        facts = history.facts[name]
        files = facts["files"]
        assert facts["batches_committed"] >= want, facts
        assert files["commits"] == facts["batches_committed"] and files["offsets"] >= files["commits"], files
        assert files["state_versions"], f"no state operator in the {name} checkpoint: {files}"
        for op, parts in files["state_versions"].items():
            assert len(parts) == 2, f"op {op}: expected 2 state partitions, got {parts}"
            for part, versions in parts.items():
                assert versions >= facts["batches_committed"], \
                    f"{name}: state/{op}/{part} has {versions} versions for {facts['batches_committed']} batches"


def test_same_report_small_and_large(history: History) -> None:
    small = inspect_checkpoint(history.small, recent=RECENT)
    large = inspect_checkpoint(history.large, recent=RECENT)
    for rep in (small, large):
        assert rep.errors == [], rep.errors
        assert rep.query_id
        assert rep.last_complete == rep.committed[-1], (rep.last_complete, rep.committed[-5:])
        assert all(b.offsets for b in rep.recent if b.batch_id in rep.planned)
    assert len(small.committed) >= SMALL and len(large.committed) >= LARGE
    assert small.operators.keys() == large.operators.keys() and small.operators
    for op in small.operators:
        assert small.operators[op].keys() == large.operators[op].keys()
    assert len(small.recent) == len(large.recent) == RECENT, (len(small.recent), len(large.recent))


def _touches(path: Path, recent: int) -> tuple[CheckpointReport, Touches]:
    with recording(path) as rec:
        report = inspect_checkpoint(path, recent=recent)
    return report, rec


def test_inspection_reads_as_many_files_at_many_batches_as_at_10(history: History,
                                                                 pytestconfig: pytest.Config) -> None:
    """Contents are read for the newest batches only; directory listings are the same directories.

    ``recent`` is below SMALL so that the window and the batch before it (whose offsets say
    where the window's first batch began) exist in both checkpoints: with the default 10 the
    small one has no batch before its window and reads one file less, legitimately.
    """
    recent = SMALL // 2
    _, small = _touches(history.small, recent)
    _, large = _touches(history.large, recent)
    _show(pytestconfig, f"\nfiles opened: small {sum(small.opened.values())} large {sum(large.opened.values())}; "
          f"directories listed: small {sum(small.listed.values())} large {sum(large.listed.values())}")
    assert small.opened, "the audit hook saw no file opened: inspection no longer reads local files with open()?"
    assert sum(large.opened.values()) == sum(small.opened.values()), \
        f"opened small={sorted(small.opened)} large={sorted(large.opened)}"
    assert sum(large.listed.values()) == sum(small.listed.values()), \
        f"listed small={dict(small.listed)} large={dict(large.listed)}"


def test_inspection_time_does_not_grow_with_history(history: History, pytestconfig: pytest.Config) -> None:
    small_s, large_s = time_calls([lambda: inspect_checkpoint(history.small, recent=RECENT),
                                   lambda: inspect_checkpoint(history.large, recent=RECENT)], RUNS)
    med_small, med_large = statistics.median(small_s), statistics.median(large_s)
    limit = TIME_RATIO * med_small + TIME_SLACK_S
    msg = (f"inspect median over {RUNS} runs: {SMALL} batches {med_small * 1000:.2f} ms, "
           f"{history.facts['large']['batches_committed']} batches {med_large * 1000:.2f} ms "
           f"(ratio {med_large / med_small:.1f}, limit {limit * 1000:.2f} ms)")
    _show(pytestconfig, "\n" + msg)
    assert med_large <= limit, msg
