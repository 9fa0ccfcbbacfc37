"""What a chaos run proved: the invariants, judged from the facts the run collected (pure).

`rewind.chaos.harness` gathers facts (what each fault did, what the supervisor recorded, what the
producer acknowledged, what Kafka and the sink hold, the DQ proof and the verifier) into one
JSON-able dict; `judge` turns them into named invariants, each with a verdict and a detail
that says what was seen. No I/O here, so every rule is tested on hand-written facts; the text a
person reads is `rewind.chaos.report`.
"""

from __future__ import annotations

from typing import Any


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
