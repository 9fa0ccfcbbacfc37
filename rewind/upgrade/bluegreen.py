"""Blue/green (``--mode blue-green``): the new version runs beside the live one, into shadow tables, before it
takes the stream over; nothing missing or written twice at the switch, and an abort leaves the live one as it
was.

How, and why each step:

1. **Green beside blue.** A savepoint of the running stream (blue is not stopped) is restored into green's own
   checkpoint, ``<checkpoint>.green-<record>``; green is the new entry with that checkpoint, its own control
   store beside it (its own lease: blue's is never touched), its own status directory, and the sink's tables
   under a prefix of its own (``<prefix>green_<hash of the record>_``: its own ledger and fence too). Its driver reads
   a registry file of its own (``green.yaml`` in the upgrade's folder).
2. **Caught up and proven.** Green must commit two batches of its own and reach blue's committed offsets; then
   its DQ proof runs over what it wrote since the savepoint, and its rows are compared with the live sink's
   (``compare_rows``). A green that fails, lags or fails its proof is stopped: blue ran on, untouched, and the
   shadow tables stay for a look.
3. **The switch.** Green stops after its batch (its end ``G``); blue runs on until it has committed past ``G``
   on every partition, then stops with a savepoint (its end ``B >= G``: the rollback's point). The stream is
   pointed at green's checkpoint and its entry switched; the new version's driver takes the stream's lease
   (the next epoch: a blue that did not stop is fenced in the sink) and re-reads ``[G, B)``: the sink's ledger
   sees those batches re-planned and writes their rows idempotently (insert-once rows are kept, totals come
   from green's state, which had not counted them), so every record is in the sink once. Why green stops
   behind blue and not ahead: a record green read past ``B`` would be in its state but only in the shadow
   tables, and never in the live ones.
4. Then as every mode: watched, proven over its first batches, rolled back to blue's savepoint if either fails.

The switch costs one driver start (green's, against the live tables) with no backlog to read; the state is
green's, already caught up. An in-place switch (green's running driver promoted at a batch boundary, no
restart) is not built: docs/upgrades.md says what it would take.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rewind.api.contract import load_transform
from rewind.checkpoints.pointer import active_checkpoint
from rewind.checkpoints.watermark import committed_end_offsets
from rewind.control.status_store import read_stream_status
from rewind.driver.sink_factory import open_sink
from rewind.proof.values import ANY, equal_values, rules_for
from rewind.registry import load_registry
from rewind.supervision.process_control import stop_stream, stream_liveness
from rewind.upgrade.proving import PROOF_BATCHES, proof_record, prove_new_version
from rewind.upgrade.rules import UpgradeRefused, short_cause

log = logging.getLogger(__name__)

__all__ = ["BlueGreenAborted", "Green", "abort", "behind_or_at", "compare_rows", "earn_the_switch", "green_entry",
           "insert_once_rows", "make_green", "wait_caught_up", "wait_past"]

EXAMPLES = 5


class BlueGreenAborted(UpgradeRefused):
    """The new version did not earn the switch; it was stopped and the live stream ran on untouched."""


@dataclass(frozen=True)
class Green:
    """The new version as it runs beside the live one (``make_green``)."""

    spec: Any
    registry: Path
    checkpoint: str
    table_prefix: str


#: The registry's longest table prefix (``SinkSpec.table_prefix``).
PREFIX_MAX = 31


def green_prefix(table_prefix: str, record_id: str) -> str:
    """Pure: green's table prefix, ``<prefix>green_<6 hex of the record id>_``, the stream's own prefix cut
    where the whole would pass the registry's 31 characters (the hash keeps two upgrades' tables apart)."""
    tag = f"green_{hashlib.sha256(record_id.encode()).hexdigest()[:6]}_"
    base = table_prefix[:PREFIX_MAX - len(tag)]
    return f"{base}{tag}" if base else f"g{tag}"


def green_checkpoint(checkpoint: str, record_id: str) -> str:
    return f"{str(checkpoint).rstrip('/')}.green-{record_id}"


def green_entry(entry: str, name: str, checkpoint: str, status_dir: str, table_prefix: str) -> str:
    """Pure: a registry file's text holding the new entry (``entry``, ``rewind.upgrade.entry.entry_text``'s
    form) pointed at green's checkpoint, status directory and shadow tables; the control store is the default,
    beside green's checkpoint (its own lease), and green takes no scheduled savepoint and has no standby."""
    doc = yaml.safe_load(entry)
    body = dict(doc[name])
    body.pop("control", None)
    body.update(checkpoint=checkpoint, status_dir=status_dir,
                sink={**dict(body.get("sink") or {}), "table_prefix": table_prefix})
    body["savepoints"] = {**dict(body.get("savepoints") or {}), "schedule": None}
    body["supervision"] = {**dict(body.get("supervision") or {}), "standby": False}
    return yaml.safe_dump({"streams": {name: body}}, sort_keys=False)


def make_green(new: Any, new_entry: str, record_id: str, folder: Path) -> Green:
    """Green's registry file in ``folder`` and its spec, as its driver will read it."""
    checkpoint = green_checkpoint(new.checkpoint, record_id)
    prefix = green_prefix(new.sink.table_prefix, record_id)
    folder.mkdir(parents=True, exist_ok=True)
    registry = folder / "green.yaml"
    registry.write_text(green_entry(new_entry, new.name, checkpoint, str(folder / "status"), prefix))
    return Green(load_registry(registry).get(new.name), registry, checkpoint, prefix)


def behind_or_at(ends: Mapping[tuple[str, int], int] | None, target: Mapping[tuple[str, int], int] | None) -> bool:
    """Pure: ``ends`` has reached ``target`` on every partition ``target`` has (None: unknown, not reached)."""
    if ends is None or target is None:
        return False
    return all(int(ends.get(tp, -1)) >= int(off) for tp, off in target.items())


def wait_caught_up(green: Any, blue: Any, after_batch: int, timeout_s: float, alive: Callable[[], bool],
                   sleep: Callable[[float], None] = time.sleep) -> tuple[bool, str]:
    """Wait until green committed ``PROOF_BATCHES`` batches past ``after_batch`` and reached blue's committed
    offsets (as blue stood when green got there); (ok, why not)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            return False, "the new version's driver ended while it caught up"
        st = read_stream_status(green)
        if st is not None and st.last_batch_id is not None and st.last_batch_id >= after_batch + PROOF_BATCHES \
                and behind_or_at(committed_end_offsets(green), committed_end_offsets(blue)):
            return True, ""
        sleep(1.0)
    st = read_stream_status(green)
    return False, (f"the new version did not catch up with the live one within {timeout_s:.0f}s (its last batch "
                   f"{st.last_batch_id if st else None}, ends {committed_end_offsets(green)}; the live one's "
                   f"{committed_end_offsets(blue)})")


def wait_past(spec: Any, target: Mapping[tuple[str, int], int], timeout_s: float,
              sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until ``spec``'s committed offsets reached ``target`` on every partition."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if behind_or_at(committed_end_offsets(spec), target):
            return True
        sleep(0.5)
    return False


def compare_rows(old_tables: Any, live: Mapping[str, pd.DataFrame], shadow: Mapping[str, pd.DataFrame]
                 ) -> dict[str, Any]:
    """Pure: green's rows against the live ones, table by table, for the insert-once tables (``on_conflict``
    ignore: a row is written once and never changes, so a key both hold came from the same record whatever
    each version's progress): keys in both whose shared columns differ (compared by the columns' types,
    ``rewind.proof.values``), with examples. Upserted tables (totals) change as windows fill and are judged
    by the proof, not here."""
    out: dict[str, Any] = {}
    for table in old_tables:
        if table.on_conflict != "ignore" or table.name not in live or table.name not in shadow:
            continue
        a, b = live[table.name], shadow[table.name]
        key = list(table.key)
        shared = [c.name for c in table.columns if c.name in a.columns and c.name in b.columns
                  and c.name not in key and c.name != "batch_id"]
        both = a.merge(b, on=key, suffixes=("_live", "_green"))
        rules = rules_for(table)
        differs = pd.Series(False, index=both.index)
        for col in shared:
            same = equal_values(both[f"{col}_live"], both[f"{col}_green"], rules.get(col, ANY))
            differs |= ~pd.Series(same, index=both.index, dtype=bool)
        examples = both[differs].head(EXAMPLES)
        out[table.name] = {"compared": int(len(both)), "differing": int(differs.sum()), "columns": shared,
                           "examples": [{k: str(v) for k, v in r.items()} for r in examples.to_dict("records")]}
    return out


def insert_once_rows(spec: Any, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rows of ``spec``'s insert-once tables: all of them, or (``like``: another sink's rows) only those
    whose first key column holds a value ``like`` has, read by chunks of keys: the live tables may hold years
    of rows, green's hold what it wrote since the savepoint."""
    chunk = 500  # values per IN (...): well under every database's parameter limit
    sink = open_sink(spec)
    try:
        out = {}
        for table in load_transform(spec).tables:
            if table.on_conflict != "ignore":
                continue
            if like is None:
                out[table.name] = sink.read_table(table.name)
                continue
            first = table.key[0]
            values = sorted({v for v in like.get(table.name, {}).get(first, []) if v is not None}, key=str)
            frames = [sink.read_rows(table.name, lambda tb, part=values[i:i + chunk], col=first: tb.c[col].in_(part))
                      for i in range(0, len(values), chunk)]
            out[table.name] = pd.concat(frames, ignore_index=True) if frames else sink.read_table(table.name).head(0)
        return out
    finally:
        sink.dispose()


def abort(rec: Any, green: Green, why: str) -> None:
    """Stop green, record why, raise ``BlueGreenAborted`` naming what is kept (``rec``: the upgrade's recorder)."""
    stop_stream(green.spec, timeout=120)
    rec.step("aborted", why)
    raise BlueGreenAborted(f"blue/green upgrade of {rec.record['stream']} aborted: {why}; the live stream ran on "
                           f"untouched, the new version's tables {green.table_prefix}* and checkpoint "
                           f"{active_checkpoint(green.spec)} are kept for a look")


def earn_the_switch(old: Any, rec: Any, green: Green, beside: Any, bootstrap: str, grace: float, scratch: Path,
                    launch_green: Callable[[Any, Path], int]) -> None:
    """Green launched beside the live stream, caught up, proven and compared; ``BlueGreenAborted`` if not."""
    try:
        launch_green(green.spec, green.registry)
    except Exception as exc:  # noqa: BLE001 - a green that cannot start is an abort, named
        abort(rec, green, f"the new version did not start beside the live one ({type(exc).__name__}: "
                           f"{short_cause(str(exc))})")
    ok, why = wait_caught_up(green.spec, old, beside.batch_id, grace,
                             alive=lambda: stream_liveness(green.spec).running)
    if not ok:
        abort(rec, green, why)
    proof = prove_new_version(green.spec, bootstrap, beside.offsets, beside.batch_id, scratch / "green-proof")
    shadow = insert_once_rows(green.spec)
    compared = compare_rows(load_transform(old).tables, insert_once_rows(old, shadow), shadow)
    rec.step("green_proven" if proof is None or proof.ok else "green_proof_failed",
             "; ".join(f"{t}: {c['compared']} rows compared, {c['differing']} differ" for t, c in compared.items()),
             compared=compared, **({"green_proof": proof_record(proof)} if proof is not None else {}))
    if proof is not None and not proof.ok:
        abort(rec, green, "the new version's output failed its proof: " + "; ".join(
            f"{f.name} [{f.frame}]" for f in proof.failures))
