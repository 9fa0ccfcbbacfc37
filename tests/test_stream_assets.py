"""A stream's committed ranges as Airflow Asset events, exactly once, on a real Airflow.

The demo stream ``flow`` is launched by its supervisor DAG; the example DAG ``dags/examples/rewind_window_totals.py``
is scheduled on its window table's Asset, watched by Rewind's trigger. While a producer writes, the driver is
SIGKILLed (the supervisor relaunches it) at the moment the triggerer is SIGKILLed right after its watcher
claimed a range (the event lost with it: announced again), and the triggerer is restarted once Airflow holds
a claimed event the watcher has not settled yet (the event kept: never announced twice). Then, from Airflow's
own records: every committed batch is in exactly one event, the ranges chain offset to offset, every event was
consumed by exactly one downstream run, and each run's sums equal a recomputation from the Kafka records.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from rewind.control.status import read_status
from rewind.paths import dag_ids, status_file
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream

pytestmark = pytest.mark.slow
STREAM, TABLE, TOPIC = "flow", "window_results", "flow-events"
ASSET = f"rewind.{STREAM}.{TABLE}"
DOWNSTREAM = f"rewind_{STREAM}_window_totals"


@pytest.fixture(scope="module")
def flow(airflow_factory: Callable[..., Any], platform: Any, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Any]]:
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.supervision.process_control import stop_stream

    home = tmp_path_factory.mktemp("assets")
    registry = home / "streams.yaml"
    registry.write_text("streams:\n" + demo_stream(
        STREAM, TOPIC, home, max_offsets=400, trigger="1 second", window='"5 seconds"', watermark_delay='"4 seconds"',
        assets="{interval: 4 seconds}"))
    stop = threading.Event()
    sent = {"n": 0}

    def producer() -> None:  # 100 events/s in 1-s rounds, until told to stop
        seq = 0
        while not stop.is_set():
            produce(platform.kafka_bootstrap, ProduceSpec(topic=TOPIC, count=100, partitions=3, id_prefix="f",
                                                          start_seq=seq, rate=0))
            seq += 100
            sent["n"] = seq
            stop.wait(1.0)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    lineage = home / "openlineage.jsonl"  # every driver's and replay's OpenLineage events (the file transport)
    (home / "openlineage.yml").write_text(f"transport:\n  type: file\n  log_file_path: {lineage}\n  append: true\n")
    af = airflow_factory(env={"REWIND_REGISTRY": str(registry), "REWIND_EXAMPLE_STREAM": STREAM,
                              "OPENLINEAGE_CONFIG": str(home / "openlineage.yml"), "REWIND_LINEAGE_INTERVAL_S": "3"})
    client = af.client()
    spec = load_registry(registry, env={"REWIND_HOME": str(home)}).get(STREAM)
    try:
        client.wait_dag(f"rewind_{STREAM}_supervisor", timeout=180)
        client.wait_dag(DOWNSTREAM, timeout=60)
        client.unpause(f"rewind_{STREAM}_supervisor")
        client.unpause(DOWNSTREAM)
        client.trigger_dag(f"rewind_{STREAM}_supervisor", {"chain": False, "watch_s": 900})
        yield {"af": af, "client": client, "spec": spec, "stop": stop, "thread": thread, "sent": sent,
               "platform": platform, "home": home, "registry": str(registry), "lineage": lineage}
    finally:
        stop.set()
        stop_stream(spec, timeout=90)
        client.close()
        af.stop()


def asset_payloads(client: Any) -> list[dict[str, Any]]:
    return [(e.get("extra") or {}).get("payload") or {} for e in client.asset_events(ASSET)]


def wait_for(what: str, check: Callable[[], Any], timeout: float, poll: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


def cursor_doc(spec: Any) -> dict[str, Any]:
    from rewind.control.location import control_store

    found = control_store(spec).read(f"assets.{TABLE}")
    return found.doc if found else {}


def test_every_committed_batch_is_in_exactly_one_event_through_a_driver_kill_and_a_triggerer_kill(
        flow: dict[str, Any]) -> None:
    client, spec, af = flow["client"], flow["spec"], flow["af"]
    wait_for("two Asset events", lambda: len(asset_payloads(client)) >= 2, 300)

    # the triggerer SIGKILLed right after the watcher claimed a range (the event is lost with it, most likely),
    # and at once the driver (its whole process group), which the supervisor relaunches
    wait_for("a claim", lambda: cursor_doc(spec).get("pending"), 60, poll=0.05)
    af.restart_component("triggerer", kill=True)
    dead = read_status(status_file(spec))
    assert dead is not None
    os.killpg(os.getpgid(dead.pid), signal.SIGKILL)
    before = len(asset_payloads(client))
    wait_for("a relaunched driver past the killed one's batch", lambda: (
        (st := read_status(status_file(spec))) is not None and st.pid != dead.pid
        and (st.last_batch_id or -1) > (dead.last_batch_id or -1) + 2), 180)
    wait_for("events after the triggerer's kill", lambda: len(asset_payloads(client)) >= before + 2, 180)

    # the triggerer restarted once Airflow holds the claimed event, before the watcher settled it
    claimed = wait_for("a claim", lambda: cursor_doc(spec).get("pending"), 60, poll=0.05)
    event_id = claimed["event"]["event_id"]
    wait_for("the claimed event in Airflow", lambda: event_id in {p.get("event_id") for p in asset_payloads(client)},
             30, poll=0.1)
    assert (cursor_doc(spec).get("pending") or {}).get("event", {}).get("event_id") == event_id, "settled too soon"
    af.restart_component("triggerer")
    before = len(asset_payloads(client))
    wait_for("events after the triggerer's restart", lambda: len(asset_payloads(client)) >= before + 2, 180)

    # the producer stops; the stream catches up; the watcher announces the rest
    flow["stop"].set()
    flow["thread"].join(30)
    from rewind.assets.cursor import read_ledger

    def caught_up() -> bool:
        ledger = read_ledger(spec)
        st = read_status(status_file(spec))
        doc = cursor_doc(spec)
        return bool(ledger and st and st.total_lag == 0 and not doc.get("pending")
                    and doc.get("through_batch") == max(b.batch_id for b in ledger))
    wait_for("every committed batch announced", caught_up, 240)
    ledger = {b.batch_id: b for b in read_ledger(spec)}
    payloads = [p for p in asset_payloads(client) if p.get("kind") == "committed"]

    # every committed batch in exactly one event; the ranges chain, offset to offset
    ids = [p["event_id"] for p in payloads]
    assert len(ids) == len(set(ids)), f"an event announced twice: {sorted(ids)}"
    announced = [b for p in payloads for b in p["batch_ids"]]
    repeated = sorted(b for b in set(announced) if announced.count(b) > 1)
    assert sorted(announced) == sorted(ledger), f"missing {sorted(set(ledger) - set(announced))}, repeated {repeated}"
    ordered = sorted(payloads, key=lambda p: p["seq"])
    assert [p["seq"] for p in ordered] == list(range(1, len(ordered) + 1))
    for prev, cur in zip(ordered, ordered[1:]):
        assert cur["start_offsets"] == prev["end_offsets"], (prev["event_id"], cur["event_id"])
        assert cur["batches"][0] == prev["batches"][1] + 1
    for p in ordered:
        assert p["end_offsets"] == ledger[p["batches"][1]].end
        assert p["table_rows"] == sum(ledger[b].rows.get(TABLE, 0) for b in p["batch_ids"])

    # OpenLineage, from the same run on a real Airflow: the killed driver's run closed with FAIL by the
    # supervisor, the relaunched one COMPLETE on a graceful stop; each run's parent is the task that launched it
    lineage_of_runs(flow, dead.pid)

    # the downstream DAG ran once per range, each event consumed by exactly one run, whose sums equal a
    # recomputation from Kafka
    outputs = wait_for("downstream runs of every event", lambda: _downstream(client, len(payloads)), 120)
    consumed = [o["event_id"] for o in outputs]
    assert sorted(consumed) == sorted(ids), "a range consumed twice or never"
    expected = recompute(flow["platform"].kafka_bootstrap, flow["registry"], ordered)
    for o in outputs:
        assert (o["event_count"], o["amount_sum"]) == expected[o["event_id"]], o
    assert sum(o["windows"] for o in outputs) > 0

    # a replay into the sink is announced once, with its range and its Airflow run; the downstream DAG
    # recomputes from the whole table, and its sums equal Kafka's
    start, end = {TOPIC: {"0": 0}}, {TOPIC: {"0": 150}}
    run = client.trigger_dag(dag_ids("").replay, {"stream": STREAM, "from": json.dumps(start), "to": json.dumps(end),
                                                  "dry_run": False, "replay_id": "assets-replay"})
    assert client.wait_dag_run(dag_ids("").replay, run, timeout=300) == "success"
    replay = wait_for("the replay's event", lambda: [p for p in asset_payloads(client) if p.get("kind") == "replay"],
                      60)
    assert len(replay) == 1, replay
    assert (replay[0]["replay_id"], replay[0]["run_id"]) == ("assets-replay", run)
    assert (replay[0]["start_offsets"], replay[0]["end_offsets"]) == (start, end)
    assert replay[0]["seq"] == len(payloads) + 1
    again = wait_for("the downstream run of the replay", lambda: _downstream(client, len(payloads) + 1), 120)
    (recomputed,) = [o for o in again if o["event_id"] == replay[0]["event_id"]]
    assert recomputed["kind"] == "replay" and recomputed["windows"] >= sum(o["windows"] for o in outputs)
    total = recompute(flow["platform"].kafka_bootstrap, flow["registry"], replay)
    assert (recomputed["event_count"], recomputed["amount_sum"]) == total[replay[0]["event_id"]]


def lineage_of_runs(flow: dict[str, Any], dead_pid: int) -> None:
    from rewind.supervision.process_control import stop_stream
    from tests.test_lineage import validate

    stop_stream(flow["spec"], timeout=90)
    events = [json.loads(line) for line in flow["lineage"].read_text().splitlines() if line.strip()]
    for event in events:
        validate(event)
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["job"]["name"] == f"rewind.{STREAM}":
            runs[event["run"]["runId"]].append(event)
    assert len(runs) == 2, {r: [e["eventType"] for e in es] for r, es in runs.items()}
    supervisor = f"rewind_{STREAM}_supervisor"
    by_task = {es[0]["run"]["facets"]["parent"]["job"]["name"]: [e["eventType"] for e in es] for es in runs.values()}
    assert set(by_task) == {f"{supervisor}.launch", f"{supervisor}.relaunch"}, by_task
    killed, relaunched = by_task[f"{supervisor}.launch"], by_task[f"{supervisor}.relaunch"]
    assert killed[0] == "START" and killed.count("RUNNING") >= 2 and killed[-1] == "FAIL", killed
    assert relaunched[0] == "START" and relaunched.count("RUNNING") >= 2 and relaunched[-1] == "COMPLETE", relaunched
    for es in runs.values():
        start = es[0]
        assert [i["name"] for i in start["inputs"]] == [TOPIC]
        assert {o["name"] for o in start["outputs"]} == {f"{STREAM}_{t}" for t in ("events", "dead_letter", TABLE)}
        assert start["run"]["facets"]["parent"]["root"]["job"]["name"] == supervisor


def _downstream(client: Any, n: int) -> list[dict[str, Any]] | None:
    """Every successful downstream run's output, once they cover ``n`` events; each run had one event."""
    runs = [r for r in client.dag_runs(DOWNSTREAM) if r["state"] == "success"]
    per_run = [client.xcom(DOWNSTREAM, r["dag_run_id"], "sum_ranges") or [] for r in runs]
    out = [o for outputs in per_run for o in outputs]
    if len(out) < n:
        return None
    assert all(len(outputs) == 1 for outputs in per_run), f"a run consumed several ranges: {per_run}"
    return out


def recompute(bootstrap: str, registry: str, payloads: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Per event: the count and amount of the Kafka records in the windows its batches wrote (the first of
    each event id, as the stream deduplicates), from a plain consumer's read of the topic."""
    from rewind.assets.consume import range_rows
    from rewind.demo.events import classify
    from rewind.kafka.client_config import base_consumer_config
    from rewind.kafka.reader import read_to_end

    window_s = 5
    groups: dict[tuple[int, str], list[Decimal]] = defaultdict(list)
    seen: set[str] = set()
    for chunk in read_to_end(base_consumer_config(bootstrap), [TOPIC]):
        for msg in chunk:
            event = classify(msg.value(), msg.timestamp()[1]).event
            if event is None or event.event_id in seen:
                continue
            seen.add(event.event_id)
            start = int(event.event_time.timestamp()) // window_s * window_s
            groups[(start, event.key)].append(Decimal(repr(event.amount)))
    out = {}
    for p in payloads:
        rows = range_rows(STREAM, TABLE, p, registry)
        count, amount = 0, Decimal(0)
        for r in rows.to_dict("records"):
            values = groups[(int(r["window_start"].timestamp()), r["key"])]
            count, amount = count + len(values), amount + sum(values, Decimal(0))
        out[p["event_id"]] = (count, str(amount.quantize(Decimal("0.1"))))
    return out

