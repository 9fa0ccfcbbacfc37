"""``rewind stream upgrade``: change a running stream's registry entry safely.

Refused before the live stream is touched (exit 3, one line): a new entry that fails validation or
names a transform that fails to load, a mode that cannot apply (``rewind.upgrade.rules``),
incompatible output tables or state, a pre-flight batch that fails (``rewind.upgrade.preflight``).
Then: stop with a savepoint, switch the checkpoint by mode and the registry entry, launch and watch
the new version, and roll back to the savepoint and the old entry when it does not become healthy
(``rewind.upgrade.steps``). Every step lands in the stream's history (``rewind.upgrade.history``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewind.api.contract import load_transform
from rewind.checkpoints.inspection import inspect_checkpoint
from rewind.checkpoints.pointer import active_checkpoint, point_to
from rewind.checkpoints.savepoints import create_savepoint, restore_savepoint
from rewind.checkpoints.watermark import committed_end_offsets
from rewind.driver.realtime import check_stream
from rewind.errors import Failed, Refused
from rewind.kafka.types import TP, offsets_to_json
from rewind.paths import paths_of
from rewind.registry import load_registry, parse_duration
from rewind.supervision.process_control import stop_stream
from rewind.upgrade import bluegreen, guard, history
from rewind.upgrade.bluegreen import BlueGreenAborted
from rewind.upgrade.entry import check_writable, load_candidate, with_entry, write_registry
from rewind.upgrade.preflight import PreflightReport, preflight
from rewind.upgrade.proving import PROOF_BATCHES, proof_record, prove_new_version
from rewind.upgrade.rules import Facts, UpgradeRefused, notes, refusals, short_cause
from rewind.upgrade.steps import first_own_batch_after, rollback, stop_with_savepoint, switch_checkpoint, watch

log = logging.getLogger(__name__)

Step = Callable[[str, str], None]


class UpgradeFailed(Failed):
    """The upgrade started and broke; the message says where the stream was left."""


@dataclass(frozen=True)
class UpgradeRequest:
    stream: str
    registry: str  # the registry file the stream is declared in (written by the switch)
    entry_text: str  # the new entry: a registry file's text (``rewind.upgrade.entry``)
    entry_where: str  # where it came from, for messages
    mode: str
    force: bool = False
    grace_s: float | None = None  # default: the new entry's supervision.startup_grace
    stop_timeout_s: float = 120.0
    preflight_timeout_s: float = 180.0


def live_facts(spec: Any) -> tuple[int | None, tuple[str, ...]]:
    """The active checkpoint's last committed batch and its stateful operators."""

    report = inspect_checkpoint(active_checkpoint(spec), recent=2)  # on local disk or in S3 alike
    return (report.committed[-1] if report.committed else None), tuple(sorted(report.operators))


class Recorder:
    """The history record of one upgrade, saved as each step ends."""

    def __init__(self, spec: Any, record: dict[str, Any], on_step: Step) -> None:
        self.spec, self.record, self.on_step = spec, record, on_step

    def step(self, name: str, detail: str = "", **fields: Any) -> None:
        self.record["steps"].append({"step": name, "at": time.time(), "detail": detail})
        self.record.update(fields)
        history.save_record(self.spec, self.record)
        guard.step(self.spec, name)
        self.on_step(name, detail)

    def finish(self, result: str, reason: str = "", **fields: Any) -> dict[str, Any]:
        self.record.update(result=result, reason=reason, finished_at=time.time(), **fields)
        history.save_record(self.spec, self.record)
        return self.record


@dataclass(frozen=True)
class Prepared:
    """An upgrade that passed every check that needs no service: the entries and the facts."""

    req: UpgradeRequest
    old: Any  # the running StreamSpec
    new: Any  # the new StreamSpec
    old_entry: str
    new_entry: str
    new_text: str  # the registry's text with the new entry
    facts: Facts


def prepare(req: UpgradeRequest) -> Prepared:
    """Refuse what is wrong before any service is asked (``Refused``, nothing done): the new entry's
    validation and transform, the registry's writability, the mode against the live checkpoint."""

    old = load_registry(req.registry).get(req.stream)
    old_entry, new_entry, new_text, new = load_candidate(req.registry, req.stream, req.entry_text, req.entry_where)
    transform = load_transform(new)  # a transform that fails to load is refused here, naming what is wrong
    if new.real_time is not None:  # a switch into real-time mode: the mode's refusals before anything stops
        try:
            check_stream(new, transform)
        except Refused as exc:
            raise UpgradeRefused(f"upgrade of {old.name} refused: {exc} -- nothing was done") from None
    check_writable(req.registry)
    committed, operators = live_facts(old)
    facts = Facts(req.mode, req.force, old, new, committed, operators)
    problems = refusals(facts)
    if problems:
        raise UpgradeRefused(f"upgrade of {old.name} refused: " + "; ".join(problems) + " -- nothing was done")
    return Prepared(req, old, new, old_entry, new_entry, new_text, facts)


#: Runs the pre-flight as a job (``rewind.upgrade.preflight_job``): (the prepared upgrade, its scratch directory)
#: -> the report, or the refusal raised.
PreflightRunner = Callable[["Prepared", Path], PreflightReport]


def upgrade(req: UpgradeRequest | Prepared, store: Any, bootstrap: str, start: Callable[[Any], int], *,
            spark: Any = None, on_step: Step = lambda _s, _d: None, scratch_root: Path | None = None,
            run_preflight: PreflightRunner | None = None, launch_green: GreenLauncher | None = None
            ) -> dict[str, Any]:
    """Run one upgrade; its history record (``result``: upgraded or rolled_back). ``start(spec)`` launches
    the stream as the registry now declares it and returns its driver's pid once it runs.
    ``run_preflight``: the pre-flight as a Spark job (the command line's child process, Airflow's
    spark-submit); None runs it in this process, on ``spark`` (tests that share one session).
    ``launch_green(spec, registry_file)``: mode blue-green's launch of the new version beside the live one.

    Raises ``Refused`` (nothing was stopped; ``BlueGreenAborted``: the new version was stopped, the live one
    ran on) and ``UpgradeFailed`` (the message says where it stopped)."""

    p = req if isinstance(req, Prepared) else prepare(req)
    old, new = p.old, p.new
    if p.req.mode == "blue-green" and launch_green is None:
        raise TypeError("mode blue-green needs launch_green: how to launch the new version beside the live one")
    store.check()
    record_id = history.new_record_id()
    record: dict[str, Any] = {
        "id": record_id, "kind": "upgrade", "stream": old.name, "mode": p.req.mode, "force": p.req.force,
        "from": {"hash": old.config_hash(), "transform": old.transform},
        "to": {"hash": new.config_hash(), "transform": new.transform}, "started_at": time.time(), "steps": [],
        "notes": notes(p.facts), "result": "running"}
    guard.take(old, record_id, f"upgrade {p.req.mode}")
    rec = Recorder(old, record, on_step)
    try:
        scratch = scratch_root or paths_of(old).home / "upgrades" / old.name / record_id
        if p.req.mode == "blue-green" and launch_green is not None:
            return _run_blue_green(p, rec, store, bootstrap, start, spark, scratch, run_preflight, launch_green)
        return _run(p, rec, store, bootstrap, start, spark, scratch, run_preflight)
    except Refused as exc:
        rec.finish("aborted" if isinstance(exc, BlueGreenAborted) else "refused", str(exc))
        raise
    except BaseException as exc:
        rec.finish("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        guard.release(old, record_id)


def _preflight(p: Prepared, rec: Recorder, store: Any, bootstrap: str, spark: Any, scratch: Path,
               run_preflight: PreflightRunner | None) -> PreflightReport:
    rec.step("preflight", f"the new version on the newest records and a copy of the newest savepoint ({p.req.mode})")
    if run_preflight is not None:
        checked = run_preflight(p, scratch / "preflight")
    else:
        checked = preflight(p.old, p.new, store, bootstrap, scratch / "preflight", spark=spark,
                            timeout_s=p.req.preflight_timeout_s)
    rec.step("preflight_passed", f"batch {checked.batch_id} of {checked.input_rows} records after savepoint "
                                 f"{checked.savepoint_id}, and {checked.newest_records} newest records",
             preflight=checked.to_json())
    return checked


def _switch_entry(p: Prepared, manifest: Any, move: Callable[[], str]) -> str:
    """The checkpoint moved (``move``: by mode), then the registry's entry: the stream is stopped now, so a
    failure here is no refusal; the message says where it stands."""
    old = p.old
    history.keep_entry(old, old.config_hash(), p.old_entry, old.transform)
    try:
        checkpoint = move()
        current = Path(p.req.registry).read_text()
        write_registry(p.req.registry, current, p.new_text)
        history.keep_entry(old, p.new.config_hash(), p.new_entry, p.new.transform)
    except Exception as exc:  # the stream is stopped now: no refusal may say "nothing was done"
        raise UpgradeFailed(f"the switch of {old.name} failed after the stop ({type(exc).__name__}: {exc}); it is "
                            f"stopped after batch {manifest.batch_id} and savepoint {manifest.savepoint_id} has its "
                            f"state: `rewind savepoint restore {old.name} {manifest.savepoint_id}`, then `rewind "
                            f"stream run {old.name}`") from exc
    return checkpoint


def _run(p: Prepared, rec: Recorder, store: Any, bootstrap: str, start: Callable[[Any], int], spark: Any,
         scratch: Path, run_preflight: PreflightRunner | None) -> dict[str, Any]:

    req, old = p.req, p.old
    _preflight(p, rec, store, bootstrap, spark, scratch, run_preflight)
    manifest = stop_with_savepoint(old, store, start, req.stop_timeout_s)
    rec.step("stopped", f"after batch {manifest.batch_id}, savepoint {manifest.savepoint_id}",
             savepoint={"id": manifest.savepoint_id, "batch_id": manifest.batch_id, "offsets": manifest.offsets})
    checkpoint = _switch_entry(p, manifest, lambda: switch_checkpoint(old, store, req.mode, manifest,
                                                                      str(rec.record["id"])))
    rec.step("switched", f"{req.mode}: checkpoint {checkpoint}, registry entry {p.new.config_hash()}",
             checkpoint=checkpoint)
    return _watch_prove_or_roll_back(p, rec, store, bootstrap, start, manifest, manifest.offsets,
                                     first_own_batch_after(old, req.mode, manifest), scratch)


def _watch_prove_or_roll_back(p: Prepared, rec: Recorder, store: Any, bootstrap: str, start: Callable[[Any], int],
                              manifest: Any, prove_from: dict[str, dict[str, int]], after: int | None,
                              scratch: Path) -> dict[str, Any]:
    """The new version launched and watched, then proven over its first batches from ``prove_from``; rolled
    back to ``manifest`` (the stop's savepoint) and the previous entry when either fails."""
    req, old, new = p.req, p.old, p.new
    grace = req.grace_s if req.grace_s is not None else parse_duration(new.supervision.startup_grace).total_seconds()
    verdict, why, attempts = watch(new, start, after, grace, on_attempt=lambda a: rec.step(
        "launched" if a.ok else "failed", "committed a batch" if a.ok else f"{a.cause}: {short_cause(a.detail)}"))
    if verdict == "healthy":
        rec.step("proving", f"the new version's first {PROOF_BATCHES} batches, from the savepoint's offsets")
        proof = prove_new_version(new, bootstrap, prove_from, after, scratch / "proof")
        if proof is None or proof.ok:
            shown = "nothing committed past the savepoint to prove" if proof is None else "proven"
            rec.step("proven", shown, **({"proof": proof_record(proof)} if proof is not None else {}))
            return rec.finish("upgraded", f"{why}; {shown}", attempts=len(attempts))
        failed = "; ".join(f"{f.name} [{f.frame}]" for f in proof.failures)
        verdict, why = "rollback", (f"the new version's output failed its proof: {failed} (run {proof.run_id}: "
                                    f"{proof.local.get('run_dir', '')})")
        rec.step("proof_failed", why, proof=proof_record(proof))

    def put_back() -> None:
        now = Path(req.registry).read_text()
        write_registry(req.registry, now, with_entry(now, old.name, p.old_entry))

    rec.step("rolling_back", why)
    try:
        back = rollback(old, store, manifest, put_back, start)
    except BaseException as exc:
        rec.finish("rollback_failed", f"{why}; then the rollback failed: {type(exc).__name__}: {exc}",
                   attempts=len(attempts))
        raise UpgradeFailed(f"the new version of {old.name} failed ({why}) and the rollback failed too ({exc}); "
                            f"savepoint {manifest.savepoint_id} holds the pre-upgrade state") from exc
    rec.step("rolled_back", f"on savepoint {manifest.savepoint_id}, first batch {back['first_batch']['batch']}")
    return rec.finish("rolled_back", why, attempts=len(attempts), rollback=back)


#: Launches green (``rewind.upgrade.bluegreen``): (its spec, its registry file) -> its driver's pid once it runs.
GreenLauncher = Callable[[Any, Path], int]


def _run_blue_green(p: Prepared, rec: Recorder, store: Any, bootstrap: str, start: Callable[[Any], int], spark: Any,
                    scratch: Path, run_preflight: PreflightRunner | None, launch_green: GreenLauncher
                    ) -> dict[str, Any]:
    """``rewind.upgrade.bluegreen``'s steps (its docstring says why each)."""
    req, old, new = p.req, p.old, p.new
    _preflight(p, rec, store, bootstrap, spark, scratch, run_preflight)
    beside = create_savepoint(old, store)
    green = bluegreen.make_green(new, p.new_entry, str(rec.record["id"]), scratch / "green")
    restore_savepoint(green.spec, store, beside.savepoint_id, running=None)
    rec.step("green_starting", f"from savepoint {beside.savepoint_id} (batch {beside.batch_id}) of the running "
                               f"stream, into tables {green.table_prefix}*",
             green={"savepoint": beside.savepoint_id, "checkpoint": active_checkpoint(green.spec),
                    "table_prefix": green.table_prefix, "registry": str(green.registry)})
    grace = req.grace_s if req.grace_s is not None else parse_duration(new.supervision.startup_grace).total_seconds()

    try:
        bluegreen.earn_the_switch(p.old, rec, green, beside, bootstrap, grace, scratch, launch_green)
    except BlueGreenAborted:
        raise
    except BaseException as exc:  # green must not outlive the upgrade that launched it
        stop_stream(green.spec, timeout=120)
        rec.step("aborted", f"{type(exc).__name__}: {exc}")
        raise
    # the switch: green stops behind blue, blue stops past green (see the module docstring)
    stop_stream(green.spec, timeout=req.stop_timeout_s)
    green_end = committed_end_offsets(green.spec) or {}
    green_at = ", ".join(f"{tp}[{part}] {off}" for (tp, part), off in sorted(green_end.items()))
    if not bluegreen.wait_past(old, green_end, timeout_s=grace):
        bluegreen.abort(rec, green, f"the live stream did not commit past the new version's offsets within "
                                    f"{grace:.0f}s ({green_at})")
    manifest = stop_with_savepoint(old, store, start, req.stop_timeout_s)
    rec.step("stopped", f"after batch {manifest.batch_id}, savepoint {manifest.savepoint_id}; the new version "
                        f"stopped at {green_at}",
             savepoint={"id": manifest.savepoint_id, "batch_id": manifest.batch_id, "offsets": manifest.offsets})
    checkpoint = active_checkpoint(green.spec)

    def move() -> str:
        point_to(old, checkpoint, f"blue/green upgrade {rec.record['id']}: the new version's checkpoint, caught up "
                                  f"beside the live one from savepoint {beside.savepoint_id}")
        return checkpoint

    _switch_entry(p, manifest, move)
    rec.step("switched", f"blue-green: checkpoint {checkpoint}, registry entry {new.config_hash()}",
             checkpoint=checkpoint)
    green_last = inspect_checkpoint(checkpoint, recent=2).committed
    starts = offsets_to_json({TP(*tp): off for tp, off in green_end.items()})
    return _watch_prove_or_roll_back(p, rec, store, bootstrap, start, manifest, starts,
                                     green_last[-1] if green_last else None, scratch)
