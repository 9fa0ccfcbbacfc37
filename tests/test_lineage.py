"""OpenLineage (issue 39, item 3): a stream's runs as run events, received by real transports, valid by the spec.

The end-to-end test runs the demo stream twice as real driver processes (``spark_jobs/stream.py``): the first
with the client's HTTP transport into a small HTTP server of this test (``OPENLINEAGE_URL``), stopped with
``rewind stream stop``; the second with the file transport (``OPENLINEAGE_CONFIG``, an ``openlineage.yml``),
made to crash by a fault point. Each run's parent is the Airflow task the hook would name: the same Spark
properties (``rewind_airflow.lineage.parent_spark_conf``), handed to the driver's JVM as a spark-submit
would (``PYSPARK_SUBMIT_ARGS``). Every event received, of both runs, is validated against the OpenLineage
JSON schema (``tests/data/openlineage``: the spec's ``OpenLineage.json`` and each facet's own schema, by its
``_schemaURL``, resolved offline through a ``referencing.Registry``).

The fast tests cover what decides the events: the dataset names, the parent, the events themselves
(validated the same way, and a damaged one refused), the emitter's thread, and "no transport: nothing".
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from referencing import Registry, Resource

from rewind.lineage.config import Lineage, configured, outcome
from rewind.lineage.emitter import Emitter
from rewind.lineage.events import Counts, Dataset, RunSpec, run_event, topic_rows
from rewind.lineage.naming import DatasetName, kafka_namespace, sink_datasets
from rewind.lineage.parent import Parent, parent_from, spark_properties, task_run_id

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "tests" / "data" / "openlineage"
CORE = "https://openlineage.io/spec/2-0-2/OpenLineage.json"


# --------------------------------------------------------------------------- the schema

def _registry() -> Registry:
    resources = [Resource.from_contents(json.loads(p.read_text())) for p in sorted(SCHEMAS.rglob("*.json"))]
    return Registry().with_resources((r.id(), r) for r in resources)  # type: ignore[misc]


REGISTRY = _registry()


#: jsonschema's formats (``uuid`` among them), with ``date-time`` read by Python (jsonschema's own check needs
#: rfc3339-validator, which is not installed)
FORMATS = FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    return not isinstance(value, str) or ("T" in value.upper() and datetime.fromisoformat(value) is not None)


def _validator(ref: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": ref}, registry=REGISTRY, format_checker=FORMATS)


def facets_of(event: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every facet of an event, with where it sits."""
    found = [(f"run.{k}", v) for k, v in (event["run"].get("facets") or {}).items()]
    found += [(f"job.{k}", v) for k, v in (event["job"].get("facets") or {}).items()]
    for side, extra in (("inputs", "inputFacets"), ("outputs", "outputFacets")):
        for d in event.get(side) or []:
            for group in ("facets", extra):
                found += [(f"{side}[{d['name']}].{k}", v) for k, v in (d.get(group) or {}).items()]
    return found


def validate(event: dict[str, Any]) -> None:
    """The event against ``RunEvent`` of the spec, then each facet against the schema its ``_schemaURL`` names
    (which must be one of the vendored files: a facet nobody checked fails)."""
    _validator(f"{CORE}#/$defs/RunEvent").validate(event)
    for where, facet in facets_of(event):
        url = facet.get("_schemaURL", "")
        assert url.split("#")[0] in {str(r) for r in REGISTRY}, f"{where}: no vendored schema for {url}"
        try:
            _validator(url).validate(facet)
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc.message}") from exc


def as_json(event: Any) -> dict[str, Any]:
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(event))


# --------------------------------------------------------------------------- fast: what decides the events

def test_datasets_are_named_as_the_openlineage_naming_spec_says(tmp_path: Path) -> None:
    assert kafka_namespace("broker1:9092,broker2:9092") == "kafka://broker1:9092"
    assert kafka_namespace("SASL_SSL://b.example.com:9093") == "kafka://b.example.com:9093"
    tables = {"events": "demo_events", "window_results": "demo_window_results"}
    pg = sink_datasets("postgresql+psycopg2://rewind:s3cret@db.internal/analytics", tables)
    assert [(d.namespace, d.name, d.table) for d in pg] == [
        ("postgres://db.internal:5432", "analytics.public.demo_events", "events"),
        ("postgres://db.internal:5432", "analytics.public.demo_window_results", "window_results")]
    assert "s3cret" not in json.dumps([d.__dict__ for d in pg])
    assert sink_datasets("postgresql://u@h:6543/db?options=-csearch_path%3Dmarts,public", {"e": "e"})[0].name \
        == "db.marts.e"
    assert sink_datasets(f"sqlite:///{tmp_path}/sink.db", {"events": "x_events"})[0] == \
        DatasetName(f"sqlite://{tmp_path}/sink.db", "x_events", "events")
    assert sink_datasets("kafka://k1:9092,k2:9092/out.", {"events": "x_events"})[0] == \
        DatasetName("kafka://k1:9092", "out.x_events", "events")
    assert sink_datasets("kafka://", {"events": "x_events"}, bootstrap="platform:19092")[0].namespace == \
        "kafka://platform:19092"
    assert sink_datasets("delta:///data/lake/", {"events": "x_events"})[0] == \
        DatasetName("file", "/data/lake/x_events", "events")
    assert sink_datasets("mysql+pymysql://u:p@m/shop", {"e": "e"})[0] == DatasetName("mysql://m:3306", "shop.e", "e")


LOGICAL = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)


def test_the_parent_is_the_providers_task_and_dag_run() -> None:
    props = spark_properties("default", "rewind_supervise_demo", "launch", 2, LOGICAL, -1, 0)
    assert list(props) == [f"spark.openlineage.{k}" for k in (
        "parentJobNamespace", "parentJobName", "parentRunId", "rootParentRunId", "rootParentJobName",
        "rootParentJobNamespace")]
    run = uuid.UUID(props["spark.openlineage.parentRunId"])
    assert run.version == 7 and run.int >> 80 == int(LOGICAL.timestamp() * 1000)  # the logical date's UUIDv7
    from openlineage.client.uuid import generate_static_uuid  # the provider's formula, spelled out

    assert str(run) == str(generate_static_uuid(LOGICAL, b"default.rewind_supervise_demo.launch.2.-1"))
    assert props["spark.openlineage.rootParentRunId"] == str(
        generate_static_uuid(LOGICAL, b"default.rewind_supervise_demo.0"))
    assert task_run_id("default", "rewind_supervise_demo", "launch", 3, LOGICAL) != str(run)  # a retry: a new run
    assert parent_from(props, {}) == Parent("default", "rewind_supervise_demo.launch", str(run), "default",
                                            "rewind_supervise_demo", props["spark.openlineage.rootParentRunId"])
    # incomplete or malformed: no parent; the environment's form when the conf says nothing
    assert parent_from({k: v for k, v in props.items() if "parentRunId" not in k}, {}) is None
    assert parent_from({**props, "spark.openlineage.parentRunId": "not-a-uuid"}, {}) is None
    rid = str(uuid.uuid4())
    got = parent_from({}, {"OPENLINEAGE_PARENT_ID": f"ns/dag.task/{rid}"})
    assert got == Parent("ns", "dag.task", rid) and not got.has_root
    root_less = {k: v for k, v in props.items() if k != "spark.openlineage.rootParentJobName"}
    assert not parent_from(root_less, {}).has_root  # type: ignore[union-attr]


def test_the_launching_task_computes_the_same_properties() -> None:
    from rewind_airflow.lineage import parent_spark_conf

    ti = SimpleNamespace(dag_id="rewind_supervise_demo", task_id="launch", try_number=2, map_index=-1)
    context = {"ti": ti, "dag_run": SimpleNamespace(logical_date=LOGICAL, clear_number=0)}
    assert parent_spark_conf(context) == spark_properties("default", "rewind_supervise_demo", "launch", 2, LOGICAL)
    manual = {"ti": ti, "dag_run": SimpleNamespace(logical_date=None, run_after=LOGICAL, clear_number=0)}
    assert parent_spark_conf(manual) == parent_spark_conf(context)  # a run without a logical date: its run_after
    assert parent_spark_conf() == {}  # outside a running task: no parent, nothing added to the submit
    from rewind_airflow.hooks.stream import SparkConnection

    cmd = SparkConnection("local[2]").command("job.py", ["demo"], name="n", conf={"spark.openlineage.a": "b"})
    assert cmd[:5] == ["spark-submit", "--master", "local[2]", "--conf", "spark.openlineage.a=b"]


RID = "0195f0a4-1c2b-7d3e-8f40-1234567890ab"
PARENT = Parent("default", "rewind_supervise_demo.launch", "0195f0a4-1c2b-7d3e-8f40-aaaaaaaaaaaa", "default",
                "rewind_supervise_demo", "0195f0a4-1c2b-7d3e-8f40-bbbbbbbbbbbb")
SPEC = RunSpec(RID, "default", "rewind.demo", "STREAMING", "STREAM", (Dataset("kafka://k:9092", "demo-events"),),
               (Dataset("sqlite:///tmp/s.db", "demo_events", "events", (("event_id", "string"), ("amount", "bigint"))),
                Dataset("sqlite:///tmp/s.db", "demo_dead_letter", "dead_letter")), PARENT, "4.2.0", 60)


def test_every_event_of_a_run_is_valid_and_says_what_ran() -> None:
    counts = Counts(7, {"demo-events": 400}, {"events": 390, "dead_letter": 10})
    events = [as_json(run_event("START", SPEC)), as_json(run_event("RUNNING", SPEC, counts=counts)),
              as_json(run_event("COMPLETE", SPEC, counts=counts)), as_json(run_event("FAIL", SPEC, error="boom")),
              as_json(run_event("ABORT", SPEC, error="fenced: epoch 3 was taken over by epoch 4 on h2"))]
    for e in events:
        validate(e)
    assert [e["eventType"] for e in events] == ["START", "RUNNING", "COMPLETE", "FAIL", "ABORT"]
    running = events[1]
    assert running["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    assert running["job"]["facets"]["jobType"]["integration"] == "REWIND"
    assert running["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 400
    assert {o["name"]: o["outputFacets"]["outputStatistics"]["rowCount"] for o in running["outputs"]} == \
        {"demo_events": 390, "demo_dead_letter": 10}
    assert running["outputs"][0]["facets"]["schema"]["fields"][1] == {"name": "amount", "type": "bigint", "fields": []}
    assert running["run"]["facets"]["parent"]["job"]["name"] == "rewind_supervise_demo.launch"
    assert running["run"]["facets"]["parent"]["root"]["job"]["name"] == "rewind_supervise_demo"
    assert events[0]["inputs"][0]["inputFacets"] == {} and "errorMessage" not in events[0]["run"]["facets"]
    assert events[3]["run"]["facets"]["errorMessage"]["message"] == "boom"
    with pytest.raises(ValueError, match="unknown OpenLineage run state"):
        run_event("PAUSED", SPEC)


def test_a_damaged_event_is_refused_by_the_schema() -> None:
    """The validation is not vacuous: each damage below fails it (the spec's core, and a facet's own schema)."""
    good = as_json(run_event("RUNNING", SPEC, counts=Counts(1, {"demo-events": 3}, {"events": 3})))
    damages = [lambda e: e["run"].pop("runId"), lambda e: e["job"].pop("namespace"),
               lambda e: e.update(eventTime="yesterday-ish"), lambda e: e.update(eventType="PAUSED"),
               lambda e: e["run"]["facets"]["parent"].pop("job"),
               lambda e: e["run"]["facets"]["parent"]["run"].update(runId="not-a-uuid"),
               lambda e: e["job"]["facets"]["jobType"].pop("processingType"),
               lambda e: e["inputs"][0]["inputFacets"]["inputStatistics"].update(rowCount="many"),
               lambda e: e["outputs"][0]["outputFacets"]["outputStatistics"].update(_schemaURL="https://x/y.json")]
    for i, damage in enumerate(damages):
        bad = json.loads(json.dumps(good))
        damage(bad)
        with pytest.raises((ValidationError, AssertionError)):
            validate(bad)
            pytest.fail(f"damage {i} passed the schema")


def test_rows_per_topic_and_how_a_driver_ends() -> None:
    assert topic_rows(["a"], 42, None, None) == {"a": 42}
    start = json.dumps({"a": {"0": 10, "1": 5}, "b": {"0": 0}})
    assert topic_rows(["a", "b"], 99, start, {"a": {"0": 15, "1": 5}, "b": {"0": 7}}) == {"a": 5, "b": 7}
    assert outcome(0, None, None) == ("COMPLETE", None)
    assert outcome(1, None, "FaultInjected: x") == ("FAIL", "FaultInjected: x")
    assert outcome(1, None, None) == ("FAIL", "the driver ended with exit code 1")
    assert outcome(1, "fenced: epoch 2 was taken over", "whatever") == ("ABORT", "fenced: epoch 2 was taken over")


def test_lineage_is_on_only_where_the_client_finds_a_transport(tmp_path: Path) -> None:
    assert not configured({}, cwd=tmp_path)
    assert configured({"OPENLINEAGE_URL": "http://marquez:5000"}, cwd=tmp_path)
    assert configured({"OPENLINEAGE__TRANSPORT__TYPE": "console"}, cwd=tmp_path)
    assert not configured({"OPENLINEAGE_URL": "http://m", "OPENLINEAGE_DISABLED": "true"}, cwd=tmp_path)
    yml = tmp_path / "openlineage.yml"
    yml.write_text("filters: []\n")  # a file without a transport: the client would print to the console
    assert not configured({}, cwd=tmp_path)
    yml.write_text("transport:\n  type: file\n  log_file_path: /tmp/x.jsonl\n")
    assert configured({}, cwd=tmp_path)
    assert configured({"OPENLINEAGE_CONFIG": str(yml)}, cwd=ROOT)


def test_without_a_transport_nothing_is_loaded_or_started() -> None:
    code = ("import sys, threading\n"
            "from types import SimpleNamespace as N\n"
            "from rewind.lineage.entry import stream_lineage\n"
            "l = stream_lineage(N(name='s', topics=['t']), 'k:1', None, '0195f0a4-1c2b-7d3e-8f40-1234567890ab')\n"
            "l.start(); l.rows(0, {'e': 1}); l.end(0)\n"
            "print(type(l).__name__, 'openlineage' in sys.modules, threading.active_count())\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(ROOT / "tests")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests", env=env,
                          timeout=60)
    assert done.stdout.split() == ["Lineage", "False", "1"], done.stderr


class Client:
    """A stand-in client: records what it is given; can fail or hang."""

    def __init__(self, fail: Exception | None = None, hang: float = 0.0) -> None:
        self.sent: list[Any] = []
        self.fail, self.hang = fail, hang

    def emit(self, event: Any) -> None:
        time.sleep(self.hang)
        if self.fail is not None:
            raise self.fail
        self.sent.append(event)

    def close(self, timeout: float) -> bool:
        return True


def test_the_emitter_never_blocks_nor_raises_and_ticks(caplog: pytest.LogCaptureFixture) -> None:
    client = Client()
    ticks: list[int] = []
    em = Emitter(client, tick_s=0.2, on_tick=lambda: ticks.append(1) or f"tick{len(ticks)}")
    em.submit(lambda: "a")
    em.submit(lambda: "b")
    time.sleep(0.7)
    em.close(2)
    assert client.sent[:2] == ["a", "b"] and sum(1 for s in client.sent if s.startswith("tick")) >= 2
    broken = Client(fail=ConnectionError("refused"))
    em = Emitter(broken)
    with caplog.at_level(logging.WARNING, logger="rewind.lineage.emitter"):
        for _ in range(5):
            em.submit(lambda: "x")
        em.close(2)
    assert sum("ConnectionError" in r.message for r in caplog.records) == 1  # once per kind of error
    slow = Client(hang=2.0)
    em = Emitter(slow, max_queued=2)
    t = time.monotonic()
    for _ in range(20):  # a hanging transport: the caller's puts return at once, the excess is dropped
        em.submit(lambda: "x")
    assert time.monotonic() - t < 0.1
    t = time.monotonic()
    em.close(0.5)
    assert time.monotonic() - t < 1.5  # the end waits a bounded time


def test_a_driver_runs_lineage_in_order_with_its_batch_figures() -> None:
    from rewind.lineage.runs import StreamLineage

    client = Client()
    stream = SimpleNamespace(name="demo", topics=["demo-events"], sink=SimpleNamespace(url="sqlite:////tmp/s.db",
                                                                                        table_prefix="demo_"))
    lin = StreamLineage(RunSpec(RID, "default", "rewind.demo", "STREAMING", "STREAM",
                                (Dataset("kafka://k:9092", "demo-events"),), (), None, "4.2.0", 0.2),
                        stream, "k:9092", client)  # type: ignore[arg-type]
    lin.outputs([SimpleNamespace(name="events", columns=[SimpleNamespace(name="event_id", type="string")])])
    time.sleep(0.3)
    assert client.sent == []  # no RUNNING before START
    lin.start()
    lin.rows(4, {"events": 12})
    lin.progress(SimpleNamespace(batchId=4, numInputRows=13, sources=[]))
    time.sleep(0.5)
    lin.end(0)
    kinds = [e.eventType.value for e in client.sent]
    assert kinds[0] == "START" and kinds[-1] == "COMPLETE" and kinds.count("RUNNING") >= 1, kinds
    last = as_json(client.sent[-1])
    validate(last)
    assert last["outputs"][0]["name"] == "demo_events" and last["outputs"][0]["namespace"] == "sqlite:///tmp/s.db"
    assert last["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 12
    assert last["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 13
    n = len(client.sent)
    time.sleep(0.4)
    assert len(client.sent) == n  # nothing after the end
    assert isinstance(Lineage(), Lineage) and Lineage().end(1, None, RuntimeError("x")) is None


# --------------------------------------------------------------------------- slow: a real stream, real transports

class Receiver(ThreadingHTTPServer):
    """An OpenLineage HTTP endpoint: every POSTed event kept, in arrival order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.paths.add(self.path)
                receiver.events.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def submit_args(conf: dict[str, str]) -> str:
    """``PYSPARK_SUBMIT_ARGS`` with ``conf`` as spark-submit's ``--conf``s: the JVM the driver starts reads them
    as it reads a submit's."""
    return " ".join(f"--conf {k}={v}" for k, v in conf.items()) + " pyspark-shell"


def of_run(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["eventType"] == kind]


@pytest.mark.slow
def test_a_stream_run_and_a_crashed_run_reach_real_transports_valid_with_topics_tables_and_parent(
        tmp_path: Path, platform: Any, new_topic: Any) -> None:
    from rewind.cli.main import main
    from rewind.control.status_store import read_stream_status
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.faults import ENV as FAULTS
    from rewind.registry import load_registry
    from rewind_airflow.lineage import parent_spark_conf
    from tests.harness.processes import StreamProcess, wait_for
    from tests.harness.registry_templates import demo_stream, write_registry

    topic = new_topic(3)
    db = tmp_path / "sink.db"
    reg = write_registry(tmp_path / "streams.yaml", demo_stream(
        "lin", topic, tmp_path, max_offsets=300, sink_url=f"sqlite:///{db}", trigger="1 second",
        window="2 seconds", watermark_delay="1 second"))
    spec = load_registry(reg).get("lin")
    ti = SimpleNamespace(dag_id="rewind_supervise_lin", task_id="launch", try_number=1, map_index=-1)
    dag_run = SimpleNamespace(logical_date=LOGICAL, clear_number=0)
    parent = parent_spark_conf({"ti": ti, "dag_run": dag_run})  # what the hook puts on the submit
    stop = threading.Event()
    producer = threading.Thread(target=lambda: produce(platform.kafka_bootstrap, ProduceSpec(
        topic, count=100_000, rate=150, partitions=3, malformed_every=40), should_stop=stop.is_set), daemon=True)
    receiver = Receiver()
    stream = StreamProcess(reg, "lin", platform.kafka_bootstrap, tmp_path, env=platform.env())
    producer.start()
    started = time.monotonic()
    try:
        # run 1: the HTTP transport; RUNNING every 2 s; stopped gracefully with `rewind stream stop`
        stream.start(OPENLINEAGE_URL=receiver.url, REWIND_LINEAGE_INTERVAL_S="2",
                     PYSPARK_SUBMIT_ARGS=submit_args(parent))
        wait_for(lambda: len([e for e in of_run(receiver.events, "RUNNING")
                              if any(i["inputFacets"] for i in e["inputs"])]) >= 2,
                 180, "two RUNNING events with a batch's figures", stream)
        assert main(["stream", "stop", "lin", "--registry", str(reg)]) == 0
        assert stream.proc is not None and stream.proc.wait(60) == 0, stream.log_tail()
        first = list(receiver.events)
        holder = read_stream_status(spec).holder  # type: ignore[union-attr]

        # run 2: the file transport (an openlineage.yml); the first batch it writes raises
        lines = tmp_path / "lineage.jsonl"
        config = tmp_path / "openlineage.yml"
        config.write_text(f"transport:\n  type: file\n  log_file_path: {lines}\n  append: true\n")
        fault = json.dumps([{"point": "batch.write", "action": "raise"}])
        stream.start(OPENLINEAGE_CONFIG=str(config), PYSPARK_SUBMIT_ARGS=submit_args(parent), **{FAULTS: fault})
        assert stream.proc is not None and stream.proc.wait(180) != 0, stream.log_tail()
        second = [json.loads(line) for line in lines.read_text().splitlines() if line.strip()]
    finally:
        stop.set()
        stream.stop()
        receiver.shutdown()
    print(f"two driver runs in {time.monotonic() - started:.0f}s; {len(first)} + {len(second)} events")

    for event in first + second:
        validate(event)
    assert receiver.paths == {"/api/v1/lineage"}

    # run 1: START, RUNNING (with the batch's rows), COMPLETE; one run id, the lease's driver id
    kinds = [e["eventType"] for e in first]
    assert kinds[0] == "START" and kinds[-1] == "COMPLETE" and kinds.count("RUNNING") >= 2, kinds
    assert set(kinds) == {"START", "RUNNING", "COMPLETE"}, kinds
    assert {e["run"]["runId"] for e in first} == {str(uuid.UUID(holder["driver_id"]))}
    start = first[0]
    assert start["job"] == {"namespace": "default", "name": "rewind.lin", "facets": start["job"]["facets"]}
    job_type = start["job"]["facets"]["jobType"]
    assert (job_type["processingType"], job_type["integration"], job_type["jobType"]) == \
        ("STREAMING", "REWIND", "STREAM")
    assert [(i["namespace"], i["name"]) for i in start["inputs"]] == [(kafka_namespace(platform.kafka_bootstrap),
                                                                       topic)]
    assert {(o["namespace"], o["name"]) for o in start["outputs"]} == {
        (f"sqlite://{db}", f"lin_{t}") for t in ("events", "dead_letter", "window_results")}
    events_out = next(o for o in start["outputs"] if o["name"] == "lin_events")
    assert "event_id" in {f["name"] for f in events_out["facets"]["schema"]["fields"]}
    figures = [e for e in of_run(first, "RUNNING") if e["inputs"][0]["inputFacets"]]
    assert all(e["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] >= 0 for e in figures)
    assert any(e["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] > 0 for e in figures)
    assert any(o["outputFacets"]["outputStatistics"]["rowCount"] > 0 for e in figures for o in e["outputs"]
               if o["name"] == "lin_events"), figures[-1]
    for e in first + second:  # the parent: the Airflow task the hook named, and its DAG run as root
        p = e["run"]["facets"]["parent"]
        assert p["job"] == {"namespace": "default", "name": "rewind_supervise_lin.launch", "facets": {}}
        assert p["run"]["runId"] == parent["spark.openlineage.parentRunId"]
        assert (p["root"]["job"]["name"], p["root"]["run"]["runId"]) == \
            ("rewind_supervise_lin", parent["spark.openlineage.rootParentRunId"])
        assert e["run"]["facets"]["processing_engine"]["name"] == "spark"

    # run 2: its own run, START then FAIL with the error
    kinds = [e["eventType"] for e in second]
    assert kinds[0] == "START" and kinds[-1] == "FAIL" and "COMPLETE" not in kinds, kinds
    assert len({e["run"]["runId"] for e in second}) == 1 and second[0]["run"]["runId"] != first[0]["run"]["runId"]
    message = second[-1]["run"]["facets"]["errorMessage"]["message"]
    assert "FaultInjected" in message or "batch.write" in message, message


def test_the_supervisor_closes_a_dead_drivers_run_with_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILLed driver cannot send its FAIL: the supervisor, recording the death, sends it for the run id its
    status keeps (the lease's driver id). Not for a driver that ended itself (its own event said so)."""
    from rewind.control.status import StreamStatus
    from rewind.supervision import reconcile

    lines = tmp_path / "lineage.jsonl"
    (tmp_path / "openlineage.yml").write_text(f"transport:\n  type: file\n  log_file_path: {lines}\n  append: true\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(tmp_path / "openlineage.yml"))
    monkeypatch.setattr(reconcile, "record_failure", lambda *a, **k: "decided")
    driver_id = uuid.uuid4().hex
    for state in ("running", "failed", "stopped"):
        monkeypatch.setattr(reconcile, "read_stream_status", lambda spec, s=state: StreamStatus(
            "demo", state=s, holder={"driver_id": driver_id}))
        assert reconcile.fail(SimpleNamespace(name="demo"), "driver_died", "its lease lapsed") == "decided"
    events = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [(e["eventType"], e["run"]["runId"], e["job"]["name"]) for e in events] == \
        [("FAIL", str(uuid.UUID(driver_id)), "rewind.demo")]
    assert events[0]["run"]["facets"]["errorMessage"]["message"] == "driver_died: its lease lapsed"
    validate(events[0])


def test_a_replay_says_what_it_read_and_wrote_or_why_it_failed() -> None:
    from rewind.lineage.runs import ReplayLineage
    from rewind.replay.run import _lineage_end

    target = SimpleNamespace(name="demo", topics=["demo-events"], sink=SimpleNamespace(
        url="postgresql://u:p@db/an", table_prefix="demo_shadow_"))
    plan = SimpleNamespace(partitions=[SimpleNamespace(topic="demo-events", records=90)])
    outcomes = []
    for status, error in (("ok", None), ("proof_failed", None), ("failed", RuntimeError("Kafka went away"))):
        client = Client()
        lin = ReplayLineage(RunSpec(RID, "default", "rewind.demo.replay", "BATCH", "REPLAY",
                                    (Dataset("kafka://k:9092", "demo-events"),), ()), target, "k:9092", client)
        lin.outputs([SimpleNamespace(name="events", columns=None)])  # type: ignore[arg-type]
        lin.start()
        report = SimpleNamespace(status=status, counts={"records_read": 87, "written": {"events": 80}})
        _lineage_end(lin, plan, report, error)  # type: ignore[arg-type]
        events = [as_json(e) for e in client.sent]
        for e in events:
            validate(e)
        outcomes.append([e["eventType"] for e in events])
        final = events[-1]
        assert final["job"]["facets"]["jobType"]["processingType"] == "BATCH"
        assert final["outputs"][0]["name"] == "an.public.demo_shadow_events"
        assert final["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 80
        assert final["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 87
    assert outcomes == [["START", "COMPLETE"], ["START", "FAIL"], ["START", "FAIL"]]
