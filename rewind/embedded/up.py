"""`make up`: the embedded platform, Airflow (which launches and supervises the streams) and their
producers, until Ctrl-C.

The demo stream gets a fast producer with faults; the inventory stream (``rewind.inventory``), when
the registry has it, a slow steady one beside it, so two streams of different shapes run under the
supervisor DAGs at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from rewind.control.status_store import read_stream_status
from rewind.embedded.airflow_local import LocalAirflow
from rewind.embedded.services import EmbeddedPlatform
from rewind.kafka.group_offsets import consumer_group
from rewind.paths import status_file
from rewind.registry import load_registry
from rewind.runtime.airflow_client import AirflowClient
from rewind.runtime.processes import ManagedProcess
from rewind.settings import SOURCE_ROOT, python_path
from rewind.supervision.process_control import default_log_path, stop_stream

#: The second stream ``rewind up`` runs beside the demo, when the registry declares it.
INVENTORY = "inventory"
#: The inventory producer: slow and steady (records/s), with one fault of each kind now and then.
INVENTORY_RATE = 20.0
INVENTORY_FAULTS = ("--malformed-every", "101", "--unknown-every", "89", "--negative-every", "67")

#: The DAG file Airflow parses: five lines that build the DAGs from the registry (rewind_airflow decides).
DAG_FILE = ("from rewind_airflow.dags.factory import build_dags\n\nglobals().update(build_dags())\n")


def dags_folder(home: Path) -> Path:
    """The checkout's ``dags/`` when Rewind runs from one, else a folder in ``home`` with the DAG file."""

    if SOURCE_ROOT is not None and (SOURCE_ROOT / "dags").is_dir():
        return SOURCE_ROOT / "dags"
    folder = home / "airflow" / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rewind_streams.py").write_text(DAG_FILE)
    return folder


def run_up(home: Path, registry: str | None, stream: str, rate: float = 200.0) -> int:
    os.environ["REWIND_HOME"] = str(home)
    reg = load_registry(registry)  # refuse a bad registry before anything starts
    spec = reg.get(stream)
    inventory = reg.streams.get(INVENTORY) if stream != INVENTORY else None
    platform = EmbeddedPlatform(home / "services")
    children: list[ManagedProcess] = []
    airflow: LocalAirflow | None = None
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"starting the embedded platform in {home} ...", flush=True)
    info = platform.start()

    env = {**info.env(), "REWIND_HOME": str(home), "PYTHONPATH": python_path()}
    if registry:
        env["REWIND_REGISTRY"] = str(Path(registry).resolve())  # the DAGs are generated from it
    os.environ.update(env)
    try:
        print("starting Airflow (api-server, scheduler, dag-processor, triggerer) ...", flush=True)
        # The Rewind page comes from the installed package (entry point airflow.plugins): no plugins folder.
        airflow = LocalAirflow(home / "airflow", dags_folder(home), home / "airflow" / "plugins", env=env,
                               platform=info)
        airflow.launch()  # migrates the DB and starts the components; readiness is awaited below
        py = sys.executable
        producer = ManagedProcess("producer", [py, "-m", "rewind.cli", "produce", "--topic", spec.topics[0],
                                               "--count", str(10**9), "--rate", str(rate), "--partitions",
                                               str(spec.partitions), "--malformed-every", "97", "--late-every",
                                               "211", "--duplicate-every", "53", "--id-prefix", "demo"],
                                  home / "logs" / "producer.log", env=env)
        producer.start()
        children.append(producer)
        if inventory is not None:
            inv_producer = ManagedProcess(
                "inventory-producer", [py, "-m", "rewind.inventory.producer", "--topic", inventory.topics[0],
                                       "--count", str(10**9), "--rate", str(INVENTORY_RATE), "--partitions",
                                       str(inventory.partitions), *INVENTORY_FAULTS],
                home / "logs" / "inventory-producer.log", env=env)
            inv_producer.start()
            children.append(inv_producer)
        time.sleep(2)  # the producers create the topics
        airflow.wait_ready(timeout=300)

        # The stream is Airflow's to run: the supervisor DAG launches it (spark-submit) and heals it.
        client = AirflowClient(airflow.url, airflow.username, airflow.password)
        supervisor = f"rewind_{stream}_supervisor"
        client.wait_dag(supervisor, timeout=180)  # the DAG processor starts once the api-server answers
        client.unpause(supervisor)
        run_id = client.trigger_dag(supervisor, {"chain": True})
        second = ""
        if inventory is not None:
            inv_supervisor = f"rewind_{INVENTORY}_supervisor"
            client.wait_dag(inv_supervisor, timeout=180)
            client.unpause(inv_supervisor)
            inv_run = client.trigger_dag(inv_supervisor, {"chain": True})
            second = (f"\n  inventory producer  {INVENTORY_RATE:.0f} updates/s to {inventory.topics[0]}, "
                      f"malformed 1/101, unknown SKU 1/89, negative 1/67; log {inv_producer.log_path}"
                      f"\n  inventory stream    launched by the DAG {inv_supervisor} (run {inv_run}); sink "
                      f"{inventory.sink.url}; prove it: .venv/bin/rewind verify {INVENTORY}")
        stream_log = default_log_path(spec)

        groups = ", ".join(consumer_group(s.name) for s in (spec, inventory) if s is not None)
        # The generated password is shown once, on the start that made it; later starts say where it is.
        login = (f"user {airflow.username}, password {airflow.password}\n{'':22}(generated now, shown once; "
                 f"kept in {airflow.password_file}, mode 0600)" if airflow.password_generated else
                 f"user {airflow.username}, password in {airflow.password_file} (generated on the first start)")
        print(f"""
Rewind is up (embedded default). Ctrl-C stops everything started here.
  Apache Kafka        {info.kafka_bootstrap}      topic {spec.topics[0]} ({spec.partitions} partitions)
  S3 (SeaweedFS)      {info.s3_endpoint}   bucket {info.bucket}; credentials in {home}/services/services.json
  demo producer       {rate:.0f} events/s, malformed 1/97, late 1/211, duplicate 1/53; log {producer.log_path}
  demo stream         launched by the DAG {supervisor} (run {run_id}); checkpoint {spec.checkpoint}; log {stream_log}
  sink                {spec.sink.url}
  status              {status_file(spec)}
  prove exactly-once  .venv/bin/rewind verify {stream}{second}
  Airflow UI          {airflow.url}   {login}; logs {airflow.log_dir}
  Rewind page         {airflow.url}/rewind/  (also "Rewind" in Airflow's navigation)
  metrics             {airflow.url}/rewind/metrics  (Prometheus text; an Airflow token, or REWIND_METRICS_TOKEN)
  consumer groups     {groups}: every committed batch's offsets (kafka-consumer-groups, Burrow)
""", flush=True)
        last = 0.0
        while not stopping:
            time.sleep(0.5)
            dead = airflow.dead_components()
            if dead:
                print(f"Airflow {', '.join(dead)} exited; see {airflow.log_dir}")
                break
            if time.time() - last >= 10:
                last = time.time()
                for shown in (spec, inventory):
                    st = read_stream_status(shown) if shown is not None else None
                    if shown is not None and st:
                        print(f"  [{time.strftime('%H:%M:%S')}] {shown.name}: {st.state}, batch {st.last_batch_id}, "
                              f"rows {st.input_rows}, lag {st.total_lag}", flush=True)
        return 0
    finally:
        _say("stopping ...")
        if airflow is not None:
            airflow.stop()  # first, so that no DAG relaunches the stream being stopped

        for started in (spec, inventory):
            if started is None:
                continue
            try:
                stop_stream(started, timeout=60)  # launched by the supervisor DAG (or relaunched by a savepoint --stop)
            except Exception as exc:  # noqa: BLE001 - the teardown goes on
                _say(f"stream {started.name} stop: {exc}")
        for child in reversed(children):
            child.stop(grace=30.0)
        platform.stop()
        _say("stopped everything that was started.")


def _say(message: str) -> None:
    """Print, but never let a closed stdout (e.g. a pipe whose reader died on Ctrl-C) stop a teardown."""
    try:
        print(message, flush=True)
    except (BrokenPipeError, OSError):
        pass
