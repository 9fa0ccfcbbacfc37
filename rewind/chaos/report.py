"""What a chaos run proved: the invariants, judged from the facts the run collected (pure).

`rewind.chaos.harness` gathers facts (what each fault did, what the supervisor recorded, what the
producer acknowledged, what Kafka and the sink hold, the DQ proof and the verifier) into one
JSON-able dict; `judge` turns them into named invariants, each with a verdict and a detail
that says what was seen; `format_text` is the report a person reads. No I/O here, so every
rule is tested on hand-written facts.

The known set (`compare_known`): every valid event the producer sent must be accounted for once,
either as its row in the events table or -- when every Kafka record carrying its id was behind
the watermark, as a skewed restart's lagging partition is -- as ``behind_watermark`` dead letters
(Spark's stateful operators would have dropped them; the stream routes them instead). Malformed
and late records are the expected dead letters; no Kafka record may be both an event and a dead
letter.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from rewind.chaos.schedule import DAMAGES, BacklogPlan


@dataclass(frozen=True)
class ProducerKnobs:
    """The known set of events: deterministic ids ``PREFIX-SEQ`` with these faults mixed in."""

    id_prefix: str = "chaos"
    malformed_every: int = 97
    late_every: int = 211
    duplicate_every: int = 53
    keys: int = 16
    late_by_s: float = 3600.0


@dataclass(frozen=True)
class Expected:
    sends: int  # records the producer sends (duplicates included)
    event_ids: frozenset[str]  # valid events: each must be in the sink exactly once
    dead_letters: int  # malformed and late records (and re-sends of late ones), by coordinates
    malformed: int
    late: int
    duplicate_sends: int


def expected_records(events: int, knobs: ProducerKnobs = ProducerKnobs()) -> Expected:
    """What the producer's plan (``rewind.demo.producer.plan_record``) sends for sequence numbers 0..events-1."""
    from rewind.demo.events import event_id_for
    from rewind.demo.producer import ProduceSpec, plan_record

    spec = ProduceSpec(topic="-", count=events, id_prefix=knobs.id_prefix, keys=knobs.keys,
                       malformed_every=knobs.malformed_every, late_every=knobs.late_every,
                       late_by=timedelta(seconds=knobs.late_by_s), duplicate_every=knobs.duplicate_every)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the kinds do not depend on the time
    ids: set[str] = set()
    sends = dead = malformed = late = dups = 0
    for seq in range(events):
        kinds = [k for k, _, _ in plan_record(spec, seq, now)]
        sends += len(kinds)
        dups += kinds.count("duplicate")
        if kinds[0] == "event":
            ids.add(event_id_for(knobs.id_prefix, seq))
        elif kinds[0] == "malformed":
            malformed += 1
            dead += len(kinds)
        else:  # late: the record and any re-send of it are dead letters
            late += 1
            dead += len(kinds)
    return Expected(sends, frozenset(ids), dead, malformed, late, dups)


def backlog_behind(plan: BacklogPlan, knobs: ProducerKnobs = ProducerKnobs()) -> int:
    """Records of valid events (re-sends included) that a skewed restart's backlog puts at or behind
    the watermark the stream stopped at: what the first catch-up batches must route to the
    dead-letter table as ``behind_watermark`` (a catch-up over more batches routes more)."""
    from rewind.demo.producer import ProduceSpec, plan_record

    spec = ProduceSpec(topic="-", count=plan.end_seq - plan.start_seq, id_prefix=knobs.id_prefix, keys=knobs.keys,
                       malformed_every=knobs.malformed_every, late_every=knobs.late_every,
                       late_by=timedelta(seconds=knobs.late_by_s), duplicate_every=knobs.duplicate_every)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the kinds do not depend on the time
    n = 0
    for seq in range(plan.start_seq, plan.end_seq):
        _, ms = plan.place(seq)
        if ms <= plan.watermark_ms:
            kinds = [k for k, _, _ in plan_record(spec, seq, now)]
            n += len(kinds) if kinds[0] == "event" else 0
    return n


Coord = tuple[str, int, int]


def compare_known(expected: Expected, ids_by_coord: dict[Coord, str], events: Iterable[tuple[str, Coord]],
                  dead: Iterable[tuple[Coord, str]], examples: int = 5) -> dict[str, Any]:
    """The known-set comparison (``facts["known"]``): ``ids_by_coord`` is the event id of every
    valid record in Kafka (duplicate sends included), ``events`` the events table as (event id,
    coordinates), ``dead`` the dead-letter table as (coordinates, reason)."""
    from rewind.stream.late_routing import BEHIND_WATERMARK

    events = list(events)
    dead = list(dead)
    sink_ids = {i for i, _ in events}
    coords_by_id: dict[str, set[Coord]] = {}
    for c, i in ids_by_coord.items():
        coords_by_id.setdefault(i, set()).add(c)
    behind = {c for c, reason in dead if reason == BEHIND_WATERMARK}
    behind_only = {i for i in expected.event_ids - sink_ids if coords_by_id.get(i) and coords_by_id[i] <= behind}
    missing = sorted(expected.event_ids - sink_ids - behind_only)
    unexpected = sorted(sink_ids - expected.event_ids)
    partly = sorted(i for i in missing if coords_by_id.get(i, set()) & behind)
    not_known = sorted(c for c in behind if ids_by_coord.get(c) not in expected.event_ids)
    both = sorted({c for _, c in events} & {c for c, _ in dead})
    return {"expected_events": len(expected.event_ids), "sink_events": len(events), "missing": len(missing),
            "missing_examples": missing[:examples], "missing_partly_behind": len(partly),
            "unexpected": len(unexpected), "unexpected_examples": unexpected[:examples],
            "duplicate_rows": len(events) - len(sink_ids), "expected_dead_letters": expected.dead_letters,
            "sink_dead_letters": len(dead), "other_dead_letters": len(dead) - sum(1 for _, r in dead
                                                                                   if r == BEHIND_WATERMARK),
            "behind_watermark": len(behind), "behind_events": len(behind_only),
            "behind_not_known": len(not_known), "behind_not_known_examples": [list(c) for c in not_known[:examples]],
            "events_also_dead": len(both), "events_also_dead_examples": [list(c) for c in both[:examples]]}


def landing(position: dict[str, Any]) -> str:
    """Where a kill landed, from the checkpoint and sink right after it (pure)."""
    planned, committed, ledger = position.get("planned"), position.get("committed"), position.get("sink_ledger")
    if planned is None:
        return "before the first batch was planned"
    if committed is not None and committed >= planned:
        return "between batches (nothing in flight)"
    if ledger is not None and ledger >= planned:
        return f"during the commit of batch {planned} (in the sink, commits/{planned} not written)"
    return f"during batch {planned} (planned, not yet in the sink)"


def landing_kind(where: str) -> str:
    """The short name of a `landing` text, for counting kills by where they landed."""
    for prefix, kind in (("during the commit", "during a batch commit"), ("during batch", "during a batch"),
                         ("between batches", "between batches"), ("before the first", "before the first batch")):
        if where.startswith(prefix):
            return kind
    return where


def _stats(values: Iterable[float | None]) -> dict[str, float] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": round(statistics.median(vals), 2), "max": round(max(vals), 2), "n": len(vals)}


def recovery_durations(faults: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max, over the faults that SIGKILLed the stream (kills and corruptions), of
    detected -> relaunched -> running -> first progress, in seconds from the SIGKILL."""
    rows = [f["recovery"] for f in faults if f.get("recovery") and f.get("kill")]
    return {k: _stats(r.get(k) for r in rows) for k in ("detect_s", "relaunch_s", "running_s", "progress_s")}


def _inv(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def judge(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The invariants of a chaos run, in the order a reader checks them."""
    out: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = facts.get("faults", [])
    planned = facts.get("schedule", {}).get("faults", [])

    out.append(_inv("harness_completed", not facts.get("harness_error"),
                    facts.get("harness_error") or "every phase ran (faults, catch-up, proof)"))
    problems = facts.get("schedule_problems", [])
    out.append(_inv("schedule_valid", not problems, "; ".join(problems) or "every fault makes sense where it runs"))

    failed = [f for f in faults if f.get("error") or not f.get("injected")]
    out.append(_inv("every_fault_injected", len(faults) == len(planned) and not failed,
                    f"{sum(1 for f in faults if f.get('injected'))} of {len(planned)} injected"
                    + "".join(f"; #{f['index']} {f['kind']}: {f.get('error') or 'not injected'}" for f in failed)))

    sup = facts.get("supervisor", {})
    out.append(_inv("supervisor_never_gave_up", not sup.get("gave_up") and not sup.get("errors"),
                    sup.get("gave_up") or "; ".join(sup.get("errors", [])) or
                    f"{len(sup.get('recoveries', []))} recoveries, none failed"))

    stopping = [f for f in faults if f["kind"] in ("kill", "corruption") and f.get("injected")]
    unrecovered = [f for f in stopping if not (f.get("recovery") or {}).get("progress_s")]
    out.append(_inv("every_kill_recovered", not unrecovered,
                    f"{len(stopping) - len(unrecovered)} of {len(stopping)} killed drivers were replaced and made "
                    "progress" + "".join(f"; #{f['index']}: no recovery" for f in unrecovered)))

    corr = [f for f in faults if f["kind"] == "corruption" and f.get("injected")]
    bad = [f for f in corr if (f.get("recovery") or {}).get("checkpoint_action") not in ("repaired", "restored")]
    out.append(_inv("corruptions_repaired_or_restored", not bad,
                    ", ".join(f"#{f['index']} {f['corruption']['damage']}: "
                              f"{(f.get('recovery') or {}).get('checkpoint_action')} (expected "
                              f"{f['corruption']['expected']})" for f in corr) or "no corruption scheduled"))

    reps = [f for f in faults if f["kind"] == "replay"]
    bad = [f for f in reps if not (f.get("replay") or {}).get("ok")]
    out.append(_inv("replays_proven", not bad,
                    ", ".join(f"#{f['index']}: exit {(f.get('replay') or {}).get('exit_code')}, "
                              f"{(f.get('replay') or {}).get('records_read')} records read, proof "
                              f"{'ok' if (f.get('replay') or {}).get('proof_ok') else 'FAILED'}" for f in reps)
                    or "no replay scheduled"))

    outs = [f for f in faults if f["kind"] == "s3_outage"]
    bad = [f for f in outs if not (f.get("s3") or {}).get("ok")]
    out.append(_inv("interrupted_savepoints_invisible", not bad,
                    ", ".join(f"#{f['index']}: {(f.get('s3') or {}).get('summary', 'not run')}" for f in outs)
                    or "no S3 outage scheduled"))

    prod = facts.get("producer", {})
    exp_sends = facts.get("expected", {}).get("sends")
    out.append(_inv("producer_delivered_all", not prod.get("errors") and prod.get("acknowledged") == exp_sends,
                    f"{prod.get('acknowledged')} of {exp_sends} records acknowledged"
                    + (f"; errors: {prod['errors'][:3]}" if prod.get("errors") else "")))

    kafka = facts.get("kafka", {})
    out.append(_inv("kafka_kept_acknowledged_records", kafka.get("acknowledged_missing") == 0,
                    f"{kafka.get('records')} records in Kafka; {kafka.get('acknowledged_missing')} acknowledged "
                    f"ones missing {kafka.get('missing_examples') or ''}".strip()))

    cu = facts.get("caught_up", {})
    out.append(_inv("stream_caught_up", bool(cu.get("ok")), cu.get("detail", "not reached")))

    k = facts.get("known", {})
    behind = int(k.get("behind_watermark") or 0)
    other_dead = k.get("other_dead_letters", k.get("sink_dead_letters"))
    ok = (k.get("missing") == 0 and k.get("unexpected") == 0 and k.get("duplicate_rows") == 0
          and other_dead == k.get("expected_dead_letters") and not k.get("behind_not_known"))
    out.append(_inv("known_events_exactly_once", ok,
                    f"{k.get('sink_events')} events in the sink and {k.get('behind_events', 0)} known ids whose every "
                    f"record is a behind_watermark dead letter, for {k.get('expected_events')} known ids: "
                    f"{k.get('missing')} missing {k.get('missing_examples') or ''}, {k.get('unexpected')} unexpected, "
                    f"{k.get('duplicate_rows')} duplicate rows; dead letters {other_dead} (expected "
                    f"{k.get('expected_dead_letters')}) plus {behind} behind the watermark"
                    + (f", {k['behind_not_known']} of which are not records of known events "
                       f"{k.get('behind_not_known_examples') or ''}" if k.get("behind_not_known") else "")))

    late = facts.get("late_checks")
    if not late:
        out.append(_inv("late_checks_ok", False, "the stream's per-batch late checks were not read"))
    else:
        bad = late.get("bad_count", 0)
        out.append(_inv("late_checks_ok", late.get("lines", 0) > 0 and bad == 0 and not late.get("status_mismatches"),
                        f"{late.get('lines', 0)} checks over {late.get('batches', 0)} batches in {late.get('path')}: "
                        f"records routed as behind the watermark == rows Spark's stateful operators dropped by it "
                        f"in {late.get('lines', 0) - bad} of {late.get('lines', 0)}"
                        + (f", NOT in {bad}: {late.get('bad')}" if bad else "") + f"; {late.get('routed', 0)} "
                        f"routed in all" + (f"; status.late_mismatches {late['status_mismatches']}"
                                             if late.get("status_mismatches") else "")
                        + ("" if late.get("lines") else " (the stream recorded no check)")
                        + (f"; {late['unreadable_lines']} unreadable line(s) (a driver killed mid-write)"
                           if late.get("unreadable_lines") else "")))

    if "events_also_dead" not in k:
        out.append(_inv("no_record_both_event_and_dead_letter", False, "not checked"))
    else:
        out.append(_inv("no_record_both_event_and_dead_letter", k["events_also_dead"] == 0,
                        f"{k['events_also_dead']} Kafka records are both an event row and a dead letter"
                        + (f" {k.get('events_also_dead_examples')}" if k["events_also_dead"] else "")))

    out.append(records_behind_watermark(facts))

    proof = facts.get("proof", {})
    out.append(_inv("dq_proof_passed", bool(proof.get("ok")),
                    f"{proof.get('expectations')} expectations, {len(proof.get('failures', []))} failed: "
                    + (", ".join(proof.get("failures", [])) or "none") + f" ({proof.get('result')})"))

    ver = facts.get("verify", {})
    out.append(_inv("verify_passed", bool(ver.get("ok")),
                    f"{ver.get('kafka_records')} Kafka records, {ver.get('sink_events')} sink events, "
                    f"{ver.get('sink_dead_letters')} dead letters, {ver.get('windows_checked')} windows checked; "
                    f"missing {_count(ver, 'missing_events')}, duplicate rows "
                    f"{(ver.get('duplicate_event_rows') or 0) + (ver.get('duplicate_coordinate_rows') or 0)}, "
                    f"window mismatches {_count(ver, 'window_mismatches')}"))
    return out


def records_behind_watermark(facts: dict[str, Any]) -> dict[str, Any]:
    """Whether the skewed restarts really put records behind the watermark. Never fails the run
    (the Python source's event-time alignment may legitimately keep every record ahead of it),
    but a run on Spark's connector where they put none proved nothing about late routing: the
    invariant then carries ``warn`` and the report says so."""
    skews = [f for f in facts.get("faults", []) if f["kind"] == "skewed_restart" and f.get("skew")]
    planned = sum(1 for f in facts.get("schedule", {}).get("faults", []) if f["kind"] == "skewed_restart")
    total = int(facts.get("known", {}).get("behind_watermark") or 0)
    fmt = (facts.get("source") or {}).get("format", "kafka")
    put = sum(int(f["skew"].get("behind_watermark") or 0) for f in skews)
    per = ", ".join(f"#{f['index']}: {f['skew'].get('behind_watermark')} (at least {f['skew'].get('expected_behind')} "
                    "expected)" for f in skews)
    if not planned:
        return _inv("records_behind_watermark", True, f"no skewed restart scheduled; {total} records behind the "
                                                       "watermark over the run")
    detail = (f"{total} records behind the watermark over the run (source format {fmt}); the {len(skews)} skewed "
              f"restart(s) put {put} there" + (f" ({per})" if per else ""))
    inv = _inv("records_behind_watermark", True, detail)
    if put == 0:
        if fmt == "kafka":
            inv["detail"] += ("; WARNING: with Spark's connector the skewed backlogs put no record behind the "
                              "watermark, so this run proved nothing about late routing")
            inv["warn"] = True
        else:
            inv["detail"] += " (expected with the Python source's event-time alignment at admission)"
    return inv


def _count(summary: dict[str, Any], key: str) -> Any:
    v = summary.get(key)
    return v.get("count") if isinstance(v, dict) else v


def faults_by_kind(faults: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in faults:
        if not f.get("injected"):
            continue
        entry = out.setdefault(f["kind"], {"count": 0})
        entry["count"] += 1
        if f["kind"] == "kill":
            landed = landing_kind((f.get("kill") or {}).get("landed", "?"))
            entry.setdefault("landed", {}).setdefault(landed, 0)
            entry["landed"][landed] += 1
        if f["kind"] == "corruption":
            entry.setdefault("damage", {}).setdefault(f["corruption"]["damage"], 0)
            entry["damage"][f["corruption"]["damage"]] += 1
        if f["kind"] == "skewed_restart":
            entry["behind_watermark"] = entry.get("behind_watermark", 0) + int((f.get("skew") or {})
                                                                               .get("behind_watermark") or 0)
    kills = sum(1 for f in faults if f.get("kill"))
    out["sigkills_total"] = kills
    return out


def _fmt_s(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}s"


def _fault_line(f: dict[str, Any]) -> str:
    head = f"  #{f['index']:<3} {f['kind']:<15}"
    if f.get("error"):
        return head + f"ERROR: {f['error']}"
    bits = []
    if f.get("kill"):
        bits.append(f"killed pid {f['kill']['pid']} {f['kill']['landed']}")
    if f.get("corruption"):
        c = f["corruption"]
        bits.append(f"{c['damage']} on batch {c.get('batch')} ({', '.join(c.get('files', [])[:2])}"
                    + (f" +{len(c['files']) - 2}" if len(c.get("files", [])) > 2 else "") + ")")
    if f.get("broker"):
        bits.append(f"broker down {f['broker'].get('down_s')}s")
    if f.get("s3"):
        bits.append(f["s3"].get("summary", ""))
    if f.get("stop"):
        bits.append(f"stopped pid {f['stop']['pid']} " + ("gracefully" if f["stop"].get("graceful") else
                                                         "(SIGKILL: it did not stop in time)"))
    if f.get("skew"):
        k = f["skew"]
        bits.append(f"backlog {k.get('records')} records (partition: count {k.get('by_partition')}) written after "
                    f"{_fmt_s(k.get('outage_s'))} down, partition {k.get('lagging_partition')} "
                    f"{k.get('skew_s')}s of event time behind the others, watermark at the stop {k.get('watermark')}; "
                    f"caught up {_fmt_s(k.get('caught_up_s'))} after the stop; {k.get('behind_watermark')} records "
                    f"behind the watermark (at least {k.get('expected_behind')} expected)")
    if f.get("replay"):
        r = f["replay"]
        bits.append(f"replay {r.get('replay_id')}: {r.get('records_read')} records, exit {r.get('exit_code')}, "
                    f"proof {'ok' if r.get('proof_ok') else 'FAILED'} in {_fmt_s(r.get('seconds'))}")
    rec = f.get("recovery")
    if rec:
        bits.append(f"-> {rec.get('cause')}, checkpoint {rec.get('checkpoint_action')}, detected "
                    f"{_fmt_s(rec.get('detect_s'))}, relaunched {_fmt_s(rec.get('relaunch_s'))}, progress "
                    f"{_fmt_s(rec.get('progress_s'))}")
    elif f["kind"] in ("broker_restart", "s3_outage", "replay", "skewed_restart"):
        bits.append("-> the stream kept running" if not f.get("stream_failed") else "-> recovered")
    return head + "; ".join(b for b in bits if b)


def format_text(report: dict[str, Any]) -> str:
    cfg = report["schedule"]["config"]
    verdict = "PASS" if report["ok"] else "FAIL"
    rec = report.get("recovery_durations", {})
    k = report.get("facts", {}).get("known", {})
    prod = report.get("facts", {}).get("producer", {})
    lines = [
        f"rewind chaos {report['stream']}: {verdict} (seed {cfg['seed']}, {cfg['events']:,} events, "
        f"{report.get('seconds', {}).get('total', 0):.0f}s)",
        "faults: " + ", ".join(f"{kind} {v['count']}" for kind, v in report["faults_by_kind"].items()
                               if isinstance(v, dict))
        + f"; SIGKILLs {report['faults_by_kind'].get('sigkills_total', 0)}",
    ]
    kills = report["faults_by_kind"].get("kill", {}).get("landed")
    if kills:
        lines.append("kills landed: " + ", ".join(f"{n} {where}" for where, n in kills.items()))
    lines.append("recovery after a kill (from the SIGKILL; median / max): "
                 + ", ".join(f"{name} {_fmt_s((rec.get(key) or {}).get('median'))} / "
                             f"{_fmt_s((rec.get(key) or {}).get('max'))}"
                             for name, key in (("detected", "detect_s"), ("relaunched", "relaunch_s"),
                                               ("first progress", "progress_s"))))
    lines.append(f"records: produced {prod.get('acknowledged')} ({k.get('expected_events')} distinct events, "
                 f"{report.get('facts', {}).get('expected', {}).get('duplicate_sends')} duplicate sends, "
                 f"{report.get('facts', {}).get('expected', {}).get('malformed')} malformed, "
                 f"{report.get('facts', {}).get('expected', {}).get('late')} late); in the sink {k.get('sink_events')} "
                 f"events, {k.get('sink_dead_letters')} dead letters ({k.get('other_dead_letters')} malformed/late, "
                 f"expected {k.get('expected_dead_letters')}; {k.get('behind_watermark', 0)} behind_watermark, "
                 f"accounting for {k.get('behind_events', 0)} known events); duplicates {k.get('duplicate_rows')}, "
                 f"missing {k.get('missing')}")
    lines.append("faults in order:")
    lines += [_fault_line(f) for f in report.get("facts", {}).get("faults", [])]
    lines.append("invariants:")
    lines += [f"  {('warn' if i.get('warn') else 'ok  ') if i['ok'] else 'FAIL'} {i['name']}: {i['detail']}"
              for i in report["invariants"]]
    lines += [f"note: {i['detail']}" for i in report["invariants"] if i.get("warn")]
    for key in ("report_json", "proof_dir", "logs"):
        if report.get("paths", {}).get(key):
            lines.append(f"{key.replace('_', ' ')}: {report['paths'][key]}")
    lines.append(f"reproduce the schedule: rewind chaos {report['stream']} --seed {cfg['seed']} --events {cfg['events']} "
                 f"--kills {cfg['kills']} --broker-restarts {cfg['broker_restarts']} --corruptions "
                 f"{cfg['corruptions']} --replays {cfg['replays']} --s3-outages {cfg['s3_outages']} --skewed-restarts "
                 f"{cfg.get('skewed_restarts', 0)}")
    return "\n".join(lines)


__all__ = ["DAMAGES", "Expected", "ProducerKnobs", "backlog_behind", "compare_known", "expected_records",
           "faults_by_kind", "format_text", "judge", "landing", "landing_kind", "records_behind_watermark",
           "recovery_durations"]
