"""Rewind over a SASL listener: a stream's Java-style ``kafka.*`` options reach every Kafka client.

A broker of this module's own has a SASL_PLAINTEXT listener (PLAIN, one user with a random
password). The stream's registry entry gives the credentials the way Spark's connector takes
them (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``); the
stream (Spark's connector), ``verify``, the DQ proof and the lag probe in the driver must all reach
the topic through that listener with them. The negative checks prove the options are really
used: a wrong password and missing credentials each fail with one clear error, not a timeout
about an unreachable broker or a traceback.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rewind.control.status import read_status
from rewind.demo.producer import ProduceSpec, plan_record
from rewind.embedded.kafka_broker import KafkaBroker
from rewind.kafka.lookups import check_reachable, true_end_offsets
from rewind.kafka.types import KafkaUnreachable
from rewind.paths import status_file
from rewind.proof.verify import verify_stream
from rewind.registry import load_registry
from rewind.runtime.processes import terminate_group
from tests.harness.registry_templates import demo_stream
from tests.harness.registry_templates import write_registry as write

ROOT = Path(__file__).resolve().parents[1]
USER = "rewind"
PASSWORD = secrets.token_urlsafe(12)
EVENTS = int(os.environ.get("REWIND_SASL_EVENTS", "3000"))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One KRaft node with a PLAINTEXT and a SASL_PLAINTEXT (PLAIN) listener, for this module."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-sasl"), sasl_users={USER: PASSWORD})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def librdkafka_sasl(password: str = PASSWORD) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": USER,
            "sasl.password": password}


def java_sasl_options(password: str = PASSWORD) -> dict[str, str]:
    """The source options as a Spark user writes them (Java client names)."""
    return {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                       f'username="{USER}" password="{password}";')}


def create_topic(broker: KafkaBroker, partitions: int = 3) -> str:
    """Created through the SASL listener (the plain one would do too: same broker)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sasl-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.sasl_bootstrap, **librdkafka_sasl()})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(timeout=30)
    return name


def produce_sasl(broker: KafkaBroker, topic: str, count: int, prefix: str, start_seq: int = 0) -> dict[str, int]:
    """Demo events with faults (malformed, late, duplicate sends) through the SASL listener."""
    from confluent_kafka import Producer

    spec = ProduceSpec(topic=topic, count=count, id_prefix=prefix, start_seq=start_seq, malformed_every=97,
                       late_every=211, duplicate_every=53, late_by=timedelta(hours=1))
    producer = Producer({"bootstrap.servers": broker.sasl_bootstrap, **librdkafka_sasl(), "linger.ms": 20})
    errors: list[str] = []
    sent = 0
    for seq in range(start_seq, start_seq + count):
        for _kind, key, value in plan_record(spec, seq, datetime.now(UTC)):
            producer.produce(topic, value=value, key=key,
                             on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
            sent += 1
        producer.poll(0)
    assert producer.flush(60) == 0, "records not delivered over SASL within 60 s"
    assert not errors, errors[:3]
    return {"sent": sent}


def write_registry(path: Path, name: str, topic: str, home: Path, fmt: str, password: str = PASSWORD) -> Path:
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "2000", **java_sasl_options(password)}
    # JSON is YAML: the JAAS line keeps its quotes and semicolon without YAML escaping rules.
    return write(path, demo_stream(name, topic, home, sink_url=f"sqlite:///{home}/sink.db", partitions="3",
                                   source=f"{{format: {fmt}, options: {json.dumps(options)}}}", trigger="1 second",
                                   window="5 seconds", watermark_delay="30 seconds", allowed_lateness="20 seconds"))


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, **extra}


def rewind_cli(*args: str, timeout: float = 120.0, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rewind.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=cli_env(**env), cwd=ROOT)


def log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def test_stream_verify_proof_and_lag_probe_over_sasl(tmp_path: Path, sasl_broker: KafkaBroker) -> None:
    """On Spark's connector (Java client options); Rewind's own clients translate the same options."""
    from rewind.proof.dq import run_proof
    from rewind.proof.report import format_proof

    fmt = "kafka"
    bootstrap = sasl_broker.sasl_bootstrap
    assert bootstrap
    name = f"sasl_{fmt}"
    topic = create_topic(sasl_broker)
    produce_sasl(sasl_broker, topic, EVENTS, name)
    registry = write_registry(tmp_path / "streams.yaml", name, topic, tmp_path / "home", fmt)
    spec = load_registry(registry).get(name)
    spath = status_file(spec)

    # 1. A bounded run (availableNow) through the CLI, with the lag probe looking every second.
    t0 = time.monotonic()
    done = rewind_cli("stream", "run", name, "--registry", str(registry), "--bootstrap", bootstrap,
                      "--available-now", timeout=420, REWIND_LAG_PROBE_S="1")
    bounded_s = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-4000:]
    first = verify_stream(spec, bootstrap)
    assert first.ok, str(first)
    assert first.kafka_records >= EVENTS and first.expected_dead_letters > 0 and first.duplicate_sends > 0

    # 2. A running stream: more events, the lag probe must report Kafka's end over SASL; SIGTERM stops it.
    produce_sasl(sasl_broker, topic, EVENTS // 3, name, start_seq=EVENTS)
    ends = {str(tp.partition): off for tp, off in
            true_end_offsets(bootstrap, topic, librdkafka_sasl()).items()}
    log = tmp_path / "stream-continuous.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rewind.cli", "stream", "run", name, "--registry",
                                 str(registry), "--bootstrap", bootstrap], stdout=out, stderr=subprocess.STDOUT,
                                env=cli_env(REWIND_LAG_PROBE_S="1"), cwd=ROOT, start_new_session=True)
    started = time.time()
    try:
        deadline = time.monotonic() + 300
        while True:
            st = read_status(spath)
            if (st is not None and st.state == "running" and st.pid == proc.pid
                    and st.end_offsets.get(topic) == ends and st.lag_at is not None and st.lag_at > started
                    and st.latest_offsets.get(topic) == ends):
                break
            assert proc.poll() is None, f"stream exited ({proc.returncode}):\n{log_tail(log)}"
            assert time.monotonic() < deadline, f"no caught-up status with a lag look-up:\n{st}\n{log_tail(log)}"
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)  # the driver's graceful stop
        assert proc.wait(timeout=90) == 0, log_tail(log)
    finally:
        if proc.poll() is None:
            terminate_group(proc.pid, grace=20.0)
    st = read_status(spath)
    assert st is not None and st.state == "stopped", st
    assert st.latest_offsets.get(topic) == ends and st.total_lag == 0, st
    assert "lag look-up failed" not in log.read_text(errors="replace"), log_tail(log)

    # 3. verify and the DQ proof, both reading Kafka through the SASL listener.
    report = verify_stream(spec, bootstrap)
    assert report.ok, str(report)
    proof = run_proof(spec, bootstrap, run_dir=tmp_path / "dq")
    assert proof.ok, format_proof(proof)
    print(json.dumps({"source": fmt, "kafka_records": report.kafka_records, "sink_events": report.sink_events,
                      "sink_dead_letters": report.sink_dead_letters, "proof_expectations": proof.expectations,
                      "bounded_run_s": round(bounded_s, 1), "latest_offsets": st.latest_offsets}))


def test_the_python_source_reads_with_the_credentials_verify_uses() -> None:
    """Rewind's Python source (``rewind_kafka``) builds its consumers from the stream's Java-style options
    with the translation ``verify``, the DQ proof and the lag probe use over the SASL listener above
    (``base_consumer_config``), and ships it to the executors with the partitions they read."""
    import pickle

    from rewind.kafka.options import parse_options
    from rewind.kafka.source import KafkaStreamReader

    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                              **java_sasl_options()}, streaming=True))
    expected = librdkafka_sasl()
    assert {k: reader.consumer_config.get(k) for k in expected} == expected
    shipped = pickle.loads(pickle.dumps(reader))
    assert {k: shipped.consumer_config.get(k) for k in expected} == expected


def test_wrong_password_fails_with_one_clear_line(tmp_path: Path, sasl_broker: KafkaBroker) -> None:
    """The registry's credentials are what the tools use: a wrong password names the problem."""
    bootstrap = sasl_broker.sasl_bootstrap
    assert bootstrap
    topic = create_topic(sasl_broker)
    produce_sasl(sasl_broker, topic, 50, "wrongpw")
    registry = write_registry(tmp_path / "streams.yaml", "wrongpw", topic, tmp_path / "home", "kafka",
                              password=PASSWORD + "-wrong")
    # --all: the stream never committed a batch, and without it verify has nothing to prove (no Kafka read)
    for args in (["verify", "wrongpw", "--all"], ["stream", "run", "wrongpw", "--available-now"]):
        t0 = time.monotonic()
        done = rewind_cli(*args, "--registry", str(registry), "--bootstrap", bootstrap, timeout=180)
        took = time.monotonic() - t0
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode != 0, done
        assert "Traceback" not in done.stderr, done.stderr
        assert len(lines) == 1, f"`rewind {args[0]}` wrote {len(lines)} lines on stderr:\n{done.stderr}"
        assert "authentication" in lines[0].lower() and "kafka.sasl.jaas.config" in lines[0], lines[0]
        assert PASSWORD not in done.stderr + done.stdout, "the password must not be printed"
        print(json.dumps({"command": args[0], "exit": done.returncode, "seconds": round(took, 1),
                          "stderr": lines[0]}))


def test_check_reachable_needs_the_credentials(sasl_broker: KafkaBroker) -> None:
    bootstrap = sasl_broker.sasl_bootstrap
    assert bootstrap
    topic = create_topic(sasl_broker)
    java = {k[len("kafka."):]: v for k, v in java_sasl_options().items()}
    assert check_reachable(bootstrap, [topic], java) == {topic: 3}
    assert check_reachable(bootstrap, [topic], librdkafka_sasl()) == {topic: 3}

    t0 = time.monotonic()
    with pytest.raises(KafkaUnreachable) as no_creds:
        check_reachable(bootstrap, [topic], timeout_s=10)
    no_creds_s = time.monotonic() - t0
    assert "kafka.security.protocol" in str(no_creds.value), str(no_creds.value)

    t0 = time.monotonic()
    wrong = {k[len("kafka."):]: v for k, v in java_sasl_options(PASSWORD + "x").items()}
    with pytest.raises(KafkaUnreachable) as bad_password:
        check_reachable(bootstrap, [topic], wrong, timeout_s=10)
    bad_password_s = time.monotonic() - t0
    message = str(bad_password.value)
    assert "authentication" in message.lower() and "kafka.sasl.jaas.config" in message, message
    assert PASSWORD not in message
    print(json.dumps({"no_credentials": {"seconds": round(no_creds_s, 1), "error": str(no_creds.value)},
                      "wrong_password": {"seconds": round(bad_password_s, 1), "error": message}}))
