"""Operated like a production service, against real services: one Airflow, one stream, one SMTP server.

One module so that the expensive parts are paid once: a real Airflow (the factory's), the stream ``ops``
launched by its supervisor DAG through spark-submit with ``SPARK_CONF_DIR`` holding a
``spark-defaults.conf``, an SMTP server (``aiosmtpd``) on a free port behind the registry's ``alerts``
(Airflow's own ``SmtpNotifier``), and a second stream ``broken`` that never runs, for the alerts.

- the ``spark-defaults.conf`` setting of ``spark.sql.shuffle.partitions`` reaches the new checkpoint
  (its offset log and its state partitions), over Rewind's default of 2;
- ``/rewind/metrics`` scraped over HTTP while the stream runs, its figures checked against the status
  file; the driver's Spark UI, linked from the page, serves Spark's own streaming metrics;
- the failed-proof mail and the crash-loop mail arrive at the SMTP server, and so does the mail of a
  savepoint run past its deadline (Airflow's Deadline Alerts: the scheduler, the triggerer, Rewind's callback);
- Apache Kafka's own ``kafka-consumer-groups`` tool reads the stream's lag, equal to Rewind's.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import httpx
import pytest

from rewind.control.status import StreamStatus, read_status, write_status
from rewind.paths import status_file
from rewind.registry import load_registry
from tests.harness.registry_templates import demo_stream

pytestmark = pytest.mark.slow

TOKEN = "scrape-token-for-the-test"  # a scraper's bearer token (REWIND_METRICS_TOKEN), only this test's
# `late`, a stream that never runs, gives its savepoint runs one second (no schedule): none can end in time
LATE_SAVEPOINTS = "{schedule: null, deadline: 1 second}"
LATE_ALERTS = ("{on: [savepoint_late], notifier: {class: smtp, to: oncall@example.test, "
               "from_email: rewind@example.test, smtp_conn_id: rewind_smtp}}")


class Inbox:
    """An SMTP server on a free port (aiosmtpd) that keeps every message it receives."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        from rewind.runtime.processes import free_port

        self.messages: list[Message] = []
        self._lock = threading.Lock()
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's hook name
        with self._lock:
            self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def wait_for(self, words: str, timeout: float) -> Message:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = [m for m in self.messages if words in str(m["Subject"])]
            if found:
                return found[0]
            time.sleep(0.5)
        raise AssertionError(f"no mail with {words!r} in its subject within {timeout:.0f}s; got "
                             f"{[str(m['Subject']) for m in self.messages]}")


def body_of(message: Message) -> str:
    parts = message.walk() if message.is_multipart() else [message]
    return "\n".join(str(p.get_payload(decode=True), "utf-8", "replace") for p in parts
                     if p.get_content_maintype() == "text")


@pytest.fixture(scope="module")
def ops(airflow_factory: Callable[..., Any], platform: Any, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.supervision.process_control import stop_stream

    home = tmp_path_factory.mktemp("ops")
    conf_dir = home / "spark-conf"
    conf_dir.mkdir()
    # the deployment turns the event log on (off by default) without a directory: Rewind puts it beside the checkpoint
    (conf_dir / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 3\nspark.eventLog.enabled true\n")
    inbox = Inbox()
    inbox.controller.start()
    produce(platform.kafka_bootstrap, ProduceSpec(topic="ops-events", count=2000, partitions=3, id_prefix="o1"))
    produce(platform.kafka_bootstrap, ProduceSpec(topic="ops-broken", count=200, partitions=2, id_prefix="b"))
    alerts = ("alerts:\n  on: [crash_loop, proof_failed]\n  notifier:\n    class: smtp\n"
              "    to: oncall@example.test\n    from_email: rewind@example.test\n    smtp_conn_id: rewind_smtp\n")
    registry = home / "streams.yaml"
    registry.write_text(alerts + "streams:\n" + demo_stream("ops", "ops-events", home, max_offsets=300,
                                                             trigger="1 second") +
                        demo_stream("broken", "ops-broken", home,
                                    restart="{strategy: fixed-delay, max_attempts: 1, delay: 1 seconds}") +
                        demo_stream("late", "ops-broken", home, savepoints=LATE_SAVEPOINTS, alerts=LATE_ALERTS))
    smtp = {"conn_type": "smtp", "host": "127.0.0.1", "port": inbox.port,
            "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 10, "retry_limit": 1}}
    af = airflow_factory(env={"REWIND_REGISTRY": str(registry), "SPARK_CONF_DIR": str(conf_dir),
                              "REWIND_METRICS_TOKEN": TOKEN, "REWIND_LAG_PROBE_S": "2",
                              "AIRFLOW_CONN_REWIND_SMTP": json.dumps(smtp)}, schedules=False)
    client = af.client()
    reg = load_registry(registry, env={"REWIND_HOME": str(home)})
    spec = reg.get("ops")
    try:
        client.wait_dag("rewind_ops_supervisor", timeout=180)
        client.unpause("rewind_ops_supervisor")
        # a short watch and no chain: the run ends once the stream runs, so stopping it later is no failure
        run = client.trigger_dag("rewind_ops_supervisor", {"chain": False, "watch_s": 20})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            st = read_status(status_file(spec))
            if st and st.state == "running" and (st.last_batch_id or 0) >= 2 and st.lag_at:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"the stream never reached batch 2; supervisor run {run}: "
                                 f"{client.task_instances('rewind_ops_supervisor', run)}")
        http = httpx.Client(base_url=af.url, timeout=30)
        yield {"af": af, "client": client, "http": http, "home": home, "registry": registry, "reg": reg,
               "spec": spec, "inbox": inbox, "platform": platform}
        http.close()
    finally:
        stop_stream(spec, timeout=90)
        client.close()
        af.stop()
        inbox.controller.stop()


def test_spark_defaults_conf_sets_the_new_checkpoints_state_partitions(ops: dict[str, Any]) -> None:
    checkpoint = Path(ops["spec"].checkpoint)
    meta = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[1])
    assert meta["conf"]["spark.sql.shuffle.partitions"] == "3", meta["conf"]  # Rewind's default is 2
    operators = [d for d in (checkpoint / "state").iterdir() if d.name.isdigit()]
    assert operators, "the demo stream's state operators wrote no state"
    for op in operators:
        assert sorted(int(p.name) for p in op.iterdir() if p.name.isdigit()) == [0, 1, 2], op
    assert any((Path(f"{checkpoint}.eventlog")).iterdir()), "the event log is not beside the checkpoint"


def test_metrics_scraped_over_http_match_the_status(ops: dict[str, Any]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    http, spec = ops["http"], ops["spec"]
    assert http.get("/rewind/metrics").status_code in (401, 403)
    assert http.get("/rewind/metrics", headers={"Authorization": "Bearer wrong"}).status_code in (401, 403)
    before = read_status(status_file(spec))
    r = http.get("/rewind/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    after = read_status(status_file(spec))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text[:500]
    assert before and after
    m = {(s.name, tuple(sorted(s.labels.items()))): s.value
         for fam in text_string_to_metric_families(r.text) for s in fam.samples if s.labels.get("stream") == "ops"}

    def v(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted({"stream": "ops", **labels}.items())))]

    assert v("rewind_stream_up") == 1 and v("rewind_stream_state", state="running") == 1
    assert (before.last_batch_id or 0) <= v("rewind_stream_last_batch_id") <= (after.last_batch_id or 0)
    lag = {f"{dict(k[1])['topic']}/{dict(k[1])['partition']}": n for k, n in m.items()
           if k[0] == "rewind_stream_lag_records"}
    assert set(lag) == set(after.lag), (lag, after.lag)  # one sample per topic/partition of the status
    assert all(n in (before.lag.get(key), after.lag.get(key)) for key, n in lag.items()), (lag, before.lag, after.lag)
    rates = {s.progress.get("input_rows_per_second") for s in (before, after)}
    assert v("rewind_stream_input_rows_per_second") in rates and v("rewind_stream_input_rows_per_second") > 0
    assert v("rewind_stream_processed_rows_per_second") in {s.progress.get("processed_rows_per_second")
                                                             for s in (before, after)}
    assert v("rewind_stream_watermark_seconds") in {s.progress.get("watermark") for s in (before, after)}
    assert 0 <= v("rewind_stream_last_batch_age_seconds") < 120
    admin = http.get("/rewind/metrics", headers={"Authorization": f"Bearer {ops['client'].token()}"})
    assert admin.status_code == 200 and "rewind_stream_up" in admin.text  # an Airflow login works too


def test_the_drivers_spark_ui_is_linked_and_serves_sparks_streaming_metrics(ops: dict[str, Any]) -> None:
    st = read_status(status_file(ops["spec"]))
    assert st and st.spark_ui and st.spark_ui.startswith("http://"), st
    page = ops["http"].get("/rewind/api/streams/ops", headers={"Authorization": f"Bearer {ops['client'].token()}"})
    assert page.json()["spark_ui"] == st.spark_ui
    port = int(st.spark_ui.rsplit(":", 1)[1].strip("/"))
    # the UI's first request starts its REST layer (Jersey): seconds on a quiet machine, far more on a loaded one
    jobs = httpx.get(f"http://127.0.0.1:{port}/api/v1/applications", timeout=180)
    assert jobs.status_code == 200 and jobs.json()[0]["name"] == "rewind-ops", jobs.text[:300]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics/prometheus/", timeout=180).text
    assert re.search(r"spark_streaming_ops_(inputRate|processingRate|latency)", text), text[:2000]


def test_a_failed_proof_and_a_crash_loop_are_mailed(ops: dict[str, Any]) -> None:
    from rewind.supervision.failures import read_failures, record_failure

    client, inbox, broken = ops["client"], ops["inbox"], ops["reg"].get("broken")
    # `broken` committed a batch covering every record of its topic, but its sink holds none of them
    write_status(status_file(broken), StreamStatus(
        stream="broken", state="stopped", last_batch_id=0, end_offsets={"ops-broken": {"0": 100, "1": 100}}))
    for dag_id in ("rewind_broken_dq", "rewind_broken_supervisor"):
        client.wait_dag(dag_id, timeout=120)
        client.unpause(dag_id)
    dq_run = client.trigger_dag("rewind_broken_dq", {})
    # the supervisor's restart strategy gave up on it (as after a crash loop): its launch is refused
    for _ in range(2):
        record_failure(broken, "query_failed", "poison batch 1", 0, {"ops-broken": {"0": 100, "1": 100}})
    assert read_failures(broken)["gave_up"], read_failures(broken)
    sup_run = client.trigger_dag("rewind_broken_supervisor", {"chain": False})
    assert client.wait_dag_run("rewind_broken_dq", dq_run, timeout=300) == "failed"
    client.wait_dag_run("rewind_broken_supervisor", sup_run, timeout=300)  # its leaf (next_run) is skipped
    states = {t["task_id"]: t["state"] for t in client.task_instances("rewind_broken_supervisor", sup_run)}
    assert states["launch"] == "failed", states

    proof = inbox.wait_for("[rewind] broken: proof failed", timeout=60)
    text = body_of(proof)
    assert proof["To"] == "oncall@example.test" and "no_kafka_record_missing" in text, text[:3000]
    assert f"{ops['af'].url}/rewind/" in text and "rewind_broken_dq" in text
    crash = inbox.wait_for("[rewind] broken: crash loop", timeout=60)
    text = body_of(crash)
    assert "gave up" in text and "rewind supervisor reset broken" in text and f"{ops['af'].url}/rewind/" in text
    assert not [m for m in inbox.messages if "[rewind] ops" in str(m["Subject"])]  # the healthy stream: quiet


def consumer_groups(bootstrap: str, group: str) -> dict[str, dict[str, int]]:
    """``kafka-consumer-groups --describe --group GROUP`` (Apache Kafka's tool), as partition -> columns."""
    from rewind.runtime.jars import java_binary, kafka_tools_classpath

    done = subprocess.run([java_binary(), "-Xmx256m", "-cp", kafka_tools_classpath(),
                           "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                           bootstrap, "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = next((i for i, cols in enumerate(lines) if cols[:2] == ["GROUP", "TOPIC"]), None)
    assert header is not None, f"kafka-consumer-groups shows no offsets of {group}:\n{done.stdout}{done.stderr}"
    names = lines[header]
    rows = [dict(zip(names, cols)) for cols in lines[header + 1:] if cols and cols[0] == group]
    return {f"{r['TOPIC']}/{r['PARTITION']}": {k: int(r[k]) for k in ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")}
            for r in rows}


def test_kafka_consumer_groups_sees_the_streams_lag(ops: dict[str, Any]) -> None:
    """Last: it stops the stream, with a backlog, and reads the group with Kafka's own tool."""
    from rewind.demo.producer import ProduceSpec, produce
    from rewind.kafka.group_offsets import consumer_group
    from rewind.supervision.process_control import stop_stream

    spec, bootstrap = ops["spec"], ops["platform"].kafka_bootstrap
    produce(bootstrap, ProduceSpec(topic="ops-events", count=6000, partitions=3, id_prefix="o2"))
    path = status_file(spec)
    seen = read_status(path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # a batch planned after the burst: its progress knows the new ends
        st = read_status(path)
        if st and seen and (st.last_batch_id or 0) >= (seen.last_batch_id or 0) + 2 and st.total_lag > 0:
            break
        time.sleep(0.5)
    stop_stream(spec, timeout=90)
    st = read_status(path)
    assert st and st.state == "stopped" and st.total_lag > 0, st
    time.sleep(2)  # the listener's commit runs on its own thread
    tool = consumer_groups(bootstrap, consumer_group("ops"))
    assert set(tool) == set(st.lag), (tool, st.lag)
    for key, row in tool.items():
        topic, part = key.rsplit("/", 1)
        assert row["CURRENT-OFFSET"] == st.end_offsets[topic][part], (key, row, st.end_offsets)
        assert row["LOG-END-OFFSET"] == st.latest_offsets[topic][part], (key, row, st.latest_offsets)
        assert row["LAG"] == st.lag[key], (key, row, st.lag)
    print(f"[consumer groups] {consumer_group('ops')}: {tool}; Rewind's lag {st.lag}")


def test_the_drivers_start_up_is_split_by_step_from_its_spark_submit_jvm(ops: dict[str, Any]) -> None:
    """Where a (re)start's time goes, from the driver's own clock: the status and one line of its log."""
    st = read_status(status_file(ops["spec"]))
    assert st is not None
    assert set(st.startup) == {"jvm", "python", "checks", "lease", "session", "query", "first_batch"}, st.startup
    assert all(0 <= v < 120 for v in st.startup.values()), st.startup
    assert st.startup["jvm"] > 0 and st.startup["session"] > 0  # spark-submit started the JVM, then Python
    from rewind.paths import paths_of

    lines = [ln for ln in paths_of(ops["spec"]).log.read_text(errors="replace").splitlines() if "first batch in" in ln]
    assert lines and "since its spark-submit JVM started" in lines[0], lines


def test_a_savepoint_run_past_its_deadline_is_mailed(ops: dict[str, Any]) -> None:
    """The scheduler finds the run's deadline (queued + 1 s) missed while it runs, the triggerer runs
    Rewind's callback, which mails through the registry's SmtpNotifier; once, not again when the run ends."""
    client, inbox, url = ops["client"], ops["inbox"], ops["af"].url
    client.wait_dag("rewind_late_savepoint", timeout=120)
    client.unpause("rewind_late_savepoint")
    run = client.trigger_dag("rewind_late_savepoint", {})
    mail = inbox.wait_for("[rewind] late: savepoint late", timeout=60)
    text = body_of(mail)
    assert mail["To"] == "oncall@example.test", mail["To"]
    assert "savepoint run has not finished 1 s after it was queued (still " in str(mail["Subject"]), mail["Subject"]
    for words in (f"rewind_late_savepoint (run {run})", "deadline 20", "rewind savepoint list late",
                  f"Rewind page: {url}/rewind/", f"Airflow run: {url}/dags/rewind_late_savepoint/runs/"):
        assert words in text, (words, text[:3000])
    client.wait_dag_run("rewind_late_savepoint", run, timeout=120)  # it ends (no checkpoint to save): no second mail
    time.sleep(3)
    assert len([m for m in inbox.messages if "savepoint late" in str(m["Subject"])]) == 1, \
        [str(m["Subject"]) for m in inbox.messages]
