"""PNG charts from the benchmarks' JSON results (``bench/results/<name>.json``, as ``make bench`` saves them).

    python bench/charts.py [RESULTS_DIR] [OUT_DIR]      # defaults: bench/results docs/img

Writes, for each result that is there (a missing one is skipped and named on stderr):
- ``savepoint.png``: savepoint create and restore time vs state size, Rewind next to boto3;
- ``throughput.png``: the demo stream and replay in records/s with each Kafka source (``kafka``,
  Spark's connector; ``rewind_kafka``, Rewind's Python Data Source) next to the raw consumer of the
  same run (and, for the stream, the rate-source reference), with the 0.5x-of-raw-consumer target;
- ``latency.png``: end-to-end latency (Kafka append -> sink commit) p50/p95/p99 per rate, the demo
  stream next to Spark's micro-batch floor at the same trigger and Spark's real-time mode, with the
  1 s p99 target at 1,000 events/s;
- ``recovery.png``: SIGKILL -> first new batch per kill, a warm standby taking over next to a
  relaunch of the same command in the same run (``bench/standby.py``), with the cold start and
  the 10 s target;
- ``overhead.png``: Rewind beside the Spark job a team would write (``bench/overhead.py``): throughput for
  the demo and the stateless inventory transform against the plain job (Spark's defaults and Rewind's
  settings), Spark's ``noop`` floor, and latency p50/p95/p99 at 1,000 events/s, with the issue's limits
  (0.95 of the plain job's throughput; its latency + 0.05 s);
- ``targets.png``: every issue target as measured / limit (below 1 is met), the throughput targets
  once per source.

Results written before the benches measured both sources (a single ``demo_stream`` / ``replay``
figure, read with ``rewind_kafka`` on the broker used before Apache Kafka) are still drawn, labelled
as measured before the move to Apache Kafka (2026-11-23).

Prints nothing on stdout but a JSON list of the files written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REWIND, REFERENCE, TARGET = "#1f6fb4", "#9a9a9a", "#c0392b"
#: One colour per Kafka source, so the two read alike in every panel.
SOURCE_COLORS = {"kafka": REWIND, "rewind_kafka": "#e08a1e"}
SOURCE_NAMES = {"kafka": "kafka (Spark's connector)", "rewind_kafka": "rewind_kafka (Python Data Source)"}
LEGACY = "rewind_kafka, before the move to Apache Kafka"


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"charts: skipping {name}: {exc}", file=sys.stderr)
        return None


def _bars(ax: Any, labels: list[str], pairs: list[tuple[float, float]], names: tuple[str, str], unit: str) -> None:
    width = 0.38
    xs = range(len(labels))
    a = ax.bar([x - width / 2 for x in xs], [p[0] for p in pairs], width, label=names[0], color=REWIND)
    b = ax.bar([x + width / 2 for x in xs], [p[1] for p in pairs], width, label=names[1], color=REFERENCE)
    for bars in (a, b):
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    for x, (mine, ref) in zip(xs, pairs):
        ax.annotate(f"{mine / ref:.2f}x", (x, max(mine, ref)), xytext=(0, 14), textcoords="offset points",
                    ha="center", fontsize=9, fontweight="bold")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel(unit)
    ax.set_yscale("log")  # sizes span two orders of magnitude
    ax.set_ylim(min(min(p) for p in pairs) / 2, max(max(p) for p in pairs) * 3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, ncol=1, frameon=False)
    ax.grid(axis="y", alpha=0.3, which="both")


def savepoint_chart(data: dict[str, Any], out: Path) -> Path:
    sizes = data["sizes"]
    labels = [f"{s['mb']:g} MB\n{s['files']} files" for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5))
    _bars(left, labels, [(s["create_s"], s["boto3_upload_s"]) for s in sizes],
          ("rewind savepoint create", "boto3 upload_file, same files"), "seconds (median, log scale)")
    left.set_title(f"create (target: within {data['target_create_ratio']}x of boto3)", fontsize=10)
    _bars(right, labels, [(s["restore_s"], s["boto3_download_s"]) for s in sizes],
          ("rewind savepoint restore", "boto3 download_file, same files"), "seconds (median, log scale)")
    right.set_title("restore (verified) vs plain download", fontsize=10)
    fig.suptitle(f"Savepoints vs state size, embedded S3 (SeaweedFS), median of {data['runs']}", fontsize=11)
    return _save(fig, out / "savepoint.png")


def source_figures(data: dict[str, Any], per_s: str) -> list[tuple[str, str, float, float]]:
    """(source format, label, records/s, ratio to the raw consumer) for each source a result measured.

    ``per_s``: the result's records-per-second key (``events_per_s``, ``records_per_s``). A result
    from before the benches measured both sources has one figure (``demo_stream`` or ``replay``)."""
    if "sources" in data:
        return [(fmt, SOURCE_NAMES.get(fmt, fmt), d[per_s], d["ratio_to_raw"]) for fmt, d in data["sources"].items()]
    old = data.get("demo_stream") or data.get("replay")
    ratio = data.get("ratio_stream_to_raw", data.get("ratio_replay_to_raw"))
    return [("rewind_kafka", LEGACY, old[per_s], ratio)] if old and ratio is not None else []


def _runs_note(data: dict[str, Any]) -> str:
    """The panel title's tail: how many runs the figures are the median of, or that they are old."""
    if "sources" not in data:
        return ", before the move to Apache Kafka (2026-11-23)"
    repeat = data.get("repeat")
    return f", median of {repeat} (source order alternating)" if repeat and repeat > 1 else ""


def throughput_chart(stream: dict[str, Any] | None, replay: dict[str, Any] | None, out: Path) -> Path | None:
    panels = []
    if stream:
        raw = stream["raw_consumer"]["events_per_s"]
        rows = [("raw confluent-kafka consumer", raw, REFERENCE)]
        rate = stream.get("rate_reference") or stream.get("rate_into_sink")
        if rate:
            rows.append(("Spark rate source -> same sink", rate["rows_per_s"], REFERENCE))
        rows += [(f"demo stream, {label}", eps, SOURCE_COLORS.get(fmt, REWIND))
                 for fmt, label, eps, _ in source_figures(stream, "events_per_s")]
        panels.append((f"demo stream, {stream['events']:,} events{_runs_note(stream)}", rows, raw))
    if replay:
        raw = replay["raw_consumer"]["records_per_s"]
        rows = [("raw consumer, same range", raw, REFERENCE)]
        rows += [(f"rewind replay (into sink), {label}", eps, SOURCE_COLORS.get(fmt, REWIND))
                 for fmt, label, eps, _ in source_figures(replay, "records_per_s")]
        panels.append((f"replay, {replay['records']:,} records{_runs_note(replay)}", rows, raw))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.6 + 1.1 * sum(len(p[1]) for p in panels)), squeeze=False)
    for ax, (title, rows, raw) in zip(axes[:, 0], panels):
        names, values, colors = zip(*rows)
        bars = ax.barh(names, values, color=colors)
        ax.bar_label(bars, labels=[f"{v:,.0f}/s ({v / raw:.2f}x raw)" for v in values], fontsize=8, padding=3)
        ax.axvline(raw * 0.5, color=TARGET, linestyle="--", linewidth=1)
        ax.text(raw * 0.5, 1.01, "target 0.5x raw", color=TARGET, fontsize=8, ha="center", va="bottom",
                transform=ax.get_xaxis_transform())
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 8)
        ax.set_xlabel("records per second (log scale)")
        ax.set_title(title, fontsize=10, pad=14)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3, which="both")
    return _save(fig, out / "throughput.png")


#: Latency runs: colour by query; the three percentiles are shades of it (p50 darkest).
LATENCY_COLORS = {"demo": REWIND, "floor": REFERENCE, "realtime": "#e08a1e"}
LATENCY_NAMES = {"demo": "Rewind demo stream", "floor": "Spark floor\n(foreachBatch only)",
                 "realtime": "Spark real-time mode"}


def _latency_label(run: dict[str, Any]) -> str:
    """The run's x label: what ran, its trigger, and why its figures are not steady-state ones."""
    trig = run["trigger"]
    if run["query"] == "realtime":
        label = f"Spark real-time mode\n{trig.replace('realTime=', 'batch ')}\n{run.get('sink', '')} sink"
    else:
        label = f"{LATENCY_NAMES[run['query']]}\ntrigger {trig}"
    prog = run.get("progress") or {}
    if not run.get("kept_up", True):
        label += "\n** fell behind **"
    if prog.get("batches") and prog.get("batches_at_max_offsets") == prog["batches"]:
        label += "\n(every batch full:\nmaxOffsetsPerTrigger)"
    return label


def latency_chart(data: dict[str, Any] | None, out: Path) -> Path | None:
    if not data or not data.get("by_rate"):
        return None
    rates = [r for r in data["by_rate"] if data["by_rate"][r]]
    fig, axes = plt.subplots(1, len(rates), figsize=(7.5 * len(rates), 6.2), squeeze=False)
    shades = {"p50": 1.0, "p95": 0.7, "p99": 0.45}
    width = 0.26
    for ax, rate in zip(axes[0], rates):
        runs = data["by_rate"][rate]
        values = []
        for x, run in enumerate(runs):
            lat = run.get("latency_s") or {}
            color = LATENCY_COLORS.get(run["query"], REWIND)
            if run.get("status") == "failed" or lat.get("p50") is None:
                ax.text(x, 0.02, "refused:\n" + str(run.get("error", "no data"))[:60], ha="center", fontsize=6,
                        rotation=90, va="bottom")
                continue
            for i, (q, alpha) in enumerate(shades.items()):
                bar = ax.bar(x + (i - 1) * width, lat[q], width, color=color, alpha=alpha)
                ax.bar_label(bar, fmt="%.3g", fontsize=6, padding=1, rotation=90)
                values.append(lat[q])
            ax.plot([x + width], [lat["max"]], marker="_", color="black", markersize=10)
        ax.set_xticks(range(len(runs)), [_latency_label(r) for r in runs], fontsize=7)
        ax.set_yscale("log")
        if values:
            ax.set_ylim(min(min(values) / 2, 0.1 / 2), max(values) * 10)
        if int(rate) == data.get("target", {}).get("rate", 1000):
            limit = data.get("target", {}).get("p99_limit_s", 1.0)
            ax.axhline(limit, color=TARGET, linestyle="--", linewidth=1)
            ax.text(-0.45, limit * 1.08, f"target p99 <= {limit:g} s", color=TARGET, fontsize=8, ha="left",
                    va="bottom")
        ax.set_ylabel("seconds, Kafka append -> commit (log scale)")
        ax.set_title(f"{int(rate):,} events/s", fontsize=10)
        ax.grid(axis="y", alpha=0.3, which="both")
        from matplotlib.patches import Patch

        handles = [Patch(color="#555555", alpha=alpha, label=q) for q, alpha in shades.items()]
        handles.append(plt.Line2D([], [], marker="_", color="black", linestyle="", markersize=10, label="max"))
        ax.legend(handles=handles, fontsize=7, loc="upper left", ncol=4)
    load = data.get("machine", {})
    fig.suptitle(f"End-to-end latency, {data['seconds']:g} s per run after a {data['warmup_s']:g} s warm-up "
                 f"(load {load.get('load_avg_1m_at_start', '?')} -> {load.get('load_avg_1m_at_end', '?')} on "
                 f"{load.get('cores', '?')} cores)", fontsize=10)
    return _save(fig, out / "latency.png")


def recovery_chart(data: dict[str, Any] | None, out: Path) -> Path | None:
    """The recovery timeline: each kill's way back, in the order the kills happened."""
    if not data or not data.get("per_round"):
        return None
    rounds = data["per_round"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = {"standby": REWIND, "relaunch": REFERENCE}
    for i, r in enumerate(rounds):
        bar = ax.bar(i, r["first_batch_s"], color=colors.get(r["way"], REWIND), width=0.6)
        ax.bar_label(bar, fmt="%.1f s", fontsize=8, padding=2)
    ax.set_xticks(range(len(rounds)), [f"kill {i + 1}\n{r['way']}" for i, r in enumerate(rounds)], fontsize=8)
    cold = data.get("reference_cold_start_to_first_batch_s")
    if cold:
        ax.axhline(cold, color="black", linestyle=":", linewidth=1)
        ax.text(len(rounds) - 0.5, cold * 1.02, f"cold start {cold:.1f} s", fontsize=8, ha="right", va="bottom")
    ax.axhline(10.0, color=TARGET, linestyle="--", linewidth=1)
    ax.text(-0.45, 10.2, "target < 10 s (median)", color=TARGET, fontsize=8, ha="left", va="bottom")
    med = data.get("median_s", {})
    ax.set_title(f"SIGKILL -> first new batch: standby median {med.get('standby_sigkill_to_first_new_batch')} s, "
                 f"relaunch median {med.get('relaunch_sigkill_to_first_new_batch')} s "
                 f"({data.get('produce_rate_eps')} events/s arriving)", fontsize=10)
    ax.set_ylabel("seconds after the SIGKILL")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=REWIND, label="warm standby takes over (rewind stream run --standby)"),
                       Patch(color=REFERENCE, label="relaunch of the same command right after the kill")],
              fontsize=8, loc="upper left")
    ax.set_ylim(0, max([r["first_batch_s"] for r in rounds] + [cold or 0, 10]) * 1.25)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out / "recovery.png")

#: bench/overhead.py's runs, in the order drawn, with their labels.
OVERHEAD_RUNS = {"rewind": "Rewind", "plain_rewind_settings": "plain PySpark,\nRewind's settings",
                 "plain_spark": "plain PySpark,\nSpark's defaults", "noop": "noop sink\n(Spark's floor)",
                 "rewind_quiet": "Rewind,\nUI off too", "rewind_event_log": "Rewind,\nevent log on"}


def overhead_chart(demo: dict[str, Any] | None, stateless: dict[str, Any] | None, latency: dict[str, Any] | None,
                   out: Path) -> Path | None:
    """Throughput per transform (records/s, the plain job with the same settings x 0.95 drawn as the limit)
    and latency per run (p50/p95/p99, the plain job's p99 + 0.05 s drawn as the limit)."""
    panels = [(t, d) for t, d in (("demo (stateful)", demo), ("inventory (stateless)", stateless)) if d]
    if not panels and not (latency and latency.get("median_of_repetitions")):
        return None
    n = len(panels) + (1 if latency else 0)
    fig, axes = plt.subplots(1, n, figsize=(5.6 * n, 5.2), squeeze=False)
    for ax, (title, data) in zip(axes[0], panels):
        kinds = [k for k in OVERHEAD_RUNS if k in data["runs"]]
        values = [data["runs"][k]["events_per_s"] for k in kinds]
        bars = ax.bar(range(len(kinds)), values, color=[REWIND if k == "rewind" else REFERENCE for k in kinds])
        ax.bar_label(bars, labels=[f"{v:,}" for v in values], fontsize=8, padding=2)
        ref = data["runs"].get("plain_rewind_settings", {}).get("events_per_s")
        if ref:
            ax.axhline(0.95 * ref, color=TARGET, linestyle="--", linewidth=1)
            ax.text(len(kinds) - 0.5, 0.95 * ref * 0.97, "0.95 of plain, same settings", color=TARGET, fontsize=7,
                    ha="right", va="top")
        ax.set_xticks(range(len(kinds)), [OVERHEAD_RUNS[k] for k in kinds], fontsize=7)
        ax.set_ylabel("records/s at a backlog")
        ax.set_title(f"{title}: {data['events']:,} records, repeat {data['repeat']}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    if latency and latency.get("median_of_repetitions"):
        ax = axes[0][-1]
        med = latency["median_of_repetitions"]
        kinds = [k for k in OVERHEAD_RUNS if k in med]
        shades = {"p50": 1.0, "p95": 0.7, "p99": 0.45}
        width = 0.26
        for x, k in enumerate(kinds):
            for i, (q, alpha) in enumerate(shades.items()):
                bar = ax.bar(x + (i - 1) * width, med[k][q], width, alpha=alpha,
                             color=REWIND if k.startswith("rewind") else REFERENCE)
                ax.bar_label(bar, fmt="%.2f", fontsize=6, padding=1)
        ref = med.get("plain_rewind_settings")
        if ref:
            ax.axhline(ref["p99"] + 0.05, color=TARGET, linestyle="--", linewidth=1)
            ax.text(-0.45, ref["p99"] + 0.08, "plain p99 + 0.05 s", color=TARGET, fontsize=7, va="bottom")
        ax.set_xticks(range(len(kinds)), [OVERHEAD_RUNS[k] for k in kinds], fontsize=7)
        ax.set_ylabel("seconds, Kafka append -> row visible")
        ax.set_title(f"latency p50/p95/p99 at {latency['rate']:,} events/s, trigger 0, "
                     f"median of {latency['repeat']}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Rewind against the same plan as a plain PySpark job (bench/overhead.py)", fontsize=10)
    return _save(fig, out / "overhead.png")


def _save(fig: Any, path: Path) -> Path:
    """Every chart is written the same way: laid out, 110 dpi, figure closed (charts are made in a loop)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def targets(results: Path) -> list[tuple[str, float, float]]:
    """(label, measured / limit, measured-vs-limit text) for each issue target whose result is there."""
    out = []
    t, r = load(results, "throughput"), load(results, "replay")
    for what, data, per_s in (("demo stream", t, "events_per_s"), ("replay", r, "records_per_s")):
        for fmt, label, _, ratio in source_figures(data, per_s) if data else []:
            name = fmt if label != LEGACY else f"{fmt}, before 2026-11-23"
            out.append((f"{what} ({name}) / raw consumer >= 0.5", 0.5 / ratio, f"{ratio:.3f} (need 0.5)"))
    s = load(results, "savepoint")
    if s:
        worst = max(s["sizes"], key=lambda x: x["create_ratio"])
        out.append(("savepoint create / boto3 <= 1.5", worst["create_ratio"] / s["target_create_ratio"],
                    f"{worst['create_ratio']:.2f} at {worst['mb']:g} MB (worst size)"))
    c = load(results, "checkpoint_inspect")
    if c:
        out.append((f"inspect {c['batches_large']:,} / {c['batches_small']} batches <= 2",
                    c["ratio"] / c["target_ratio"], f"{c['ratio']:.2f}"))
    lat = load(results, "latency")
    if lat and lat.get("target", {}).get("p99_s") is not None:
        t = lat["target"]
        out.append((f"latency p99 at {t['rate']:,} ev/s <= {t['p99_limit_s']:g} s (trigger {t['best_demo_trigger']})",
                    t["p99_s"] / t["p99_limit_s"], f"{t['p99_s']:.2f} s"))
    rec = load(results, "recovery")
    if rec:
        v = rec["median_s"]["sigkill_to_first_new_batch"]
        out.append(("recovery via the supervisor, SIGKILL -> first batch < 10 s", v / 10.0, f"{v:.1f} s"))
    for name, what in (("overhead", "demo"), ("overhead_inventory", "inventory")):
        o = load(results, name)
        ratio = (o or {}).get("runs", {}).get("rewind", {}).get("ratio_to_plain_rewind_settings")
        if ratio:
            out.append((f"{what} stream / plain PySpark, same settings >= 0.95", 0.95 / ratio, f"{ratio:.3f}"))
    ol = load(results, "overhead_latency")
    med = (ol or {}).get("median_of_repetitions", {})
    if "rewind" in med and "plain_rewind_settings" in med:
        for q in ("p50", "p99"):
            limit = med["plain_rewind_settings"][q] + 0.05
            out.append((f"latency {q} <= plain PySpark's + 0.05 s", med["rewind"][q] / limit,
                        f"{med['rewind'][q]:.2f} s (limit {limit:.2f} s)"))
    plain = (r or {}).get("sources", {}).get("kafka", {}).get("ratio_to_plain_batch_job")
    if plain:
        out.append(("replay / plain PySpark batch job >= 0.9", 0.9 / plain, f"{plain:.3f}"))
    sb = load(results, "standby")
    if sb and sb["median_s"].get("standby_sigkill_to_first_new_batch") is not None:
        v = sb["median_s"]["standby_sigkill_to_first_new_batch"]
        out.append(("recovery with a warm standby, SIGKILL -> first batch < 10 s", v / 10.0, f"{v:.1f} s"))
    return out


def targets_chart(rows: list[tuple[str, float, str]], out: Path) -> Path | None:
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.55 * len(rows)))
    names, values, texts = zip(*rows)
    bars = ax.barh(names, values, color=[REWIND if v <= 1 else TARGET for v in values])
    ax.bar_label(bars, labels=[f"{t}  {'met' if v <= 1 else 'NOT met'}" for t, v in zip(texts, values)],
                 fontsize=8, padding=3)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(min(min(values) / 2, 0.1), max(max(values) * 15, 5))  # room for the labels
    ax.set_xlabel("cost relative to the target's limit (log scale; <= 1 is met)")
    ax.set_title("Issue targets, each from its bench's latest result (dates in docs/benchmarks.md)", fontsize=10)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3, which="both")
    return _save(fig, out / "targets.png")


def main(argv: list[str]) -> None:
    results = Path(argv[0]) if argv else ROOT / "bench" / "results"
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    sp = load(results, "savepoint")
    if sp:
        written.append(savepoint_chart(sp, out))
    written.append(throughput_chart(load(results, "throughput"), load(results, "replay"), out))
    written.append(latency_chart(load(results, "latency"), out))
    written.append(recovery_chart(load(results, "standby"), out))
    written.append(overhead_chart(load(results, "overhead"), load(results, "overhead_inventory"),
                                  load(results, "overhead_latency"), out))
    written.append(targets_chart(targets(results), out))
    print(json.dumps([str(p) for p in written if p is not None]))


if __name__ == "__main__":
    main(sys.argv[1:])
