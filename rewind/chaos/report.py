"""The chaos report a person reads: summaries of the facts, and the text (pure).

Why apart from the verdict: `rewind.chaos.judge` decides; this module describes -- where each
kill landed (`landing`, from the checkpoint and sink right after it), faults counted by kind,
recovery durations -- and puts them beside the verdict (`build_report`, the ``report.json``);
`format_text` is the ``report.txt`` that ``rewind chaos`` prints. No I/O here, so the report is
tested on hand-written facts.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from rewind.chaos.judge import judge


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


def build_report(stream: str, facts: dict[str, Any], seconds: dict[str, float], savepoints: list[dict[str, Any]],
                 machine: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """The report (``report.json``): the verdict of `rewind.chaos.judge.judge` over the facts (their
    ``schedule`` included), with the summaries a reader looks for first."""
    invariants = judge(facts)
    return {"stream": stream, "ok": all(i["ok"] for i in invariants), "invariants": invariants,
            "faults_by_kind": faults_by_kind(facts["faults"]),
            "recovery_durations": recovery_durations(facts["faults"]),
            "schedule": facts["schedule"], "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "savepoints": savepoints, "facts": facts, "machine": machine, "paths": paths}


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
    lines.append(f"reproduce the schedule: rewind chaos {report['stream']} --seed {cfg['seed']} "
                 f"--events {cfg['events']} --kills {cfg['kills']} --broker-restarts {cfg['broker_restarts']} "
                 f"--corruptions {cfg['corruptions']} --replays {cfg['replays']} --s3-outages {cfg['s3_outages']} "
                 f"--skewed-restarts {cfg.get('skewed_restarts', 0)}")
    return "\n".join(lines)
