"""A provider that plays well: no connection type taken from the Apache Kafka provider; provider info that
names every module with an operator, hook, sensor or trigger, whose every parameter is documented; and the
spark-submit commands it runs, pinned, the detached one checked against the Spark provider's own.

The clash check runs Airflow's own providers manager in a fresh process (both providers installed, as
requirements.txt pins them) and reads what it logs; the same probe with Rewind declaring ``kafka`` again
shows the warning it looks for, so the check cannot pass by not seeing it.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLASH = "has been already registered"

PROBE = """
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
import rewind_airflow
if os.environ.get("REDECLARE_KAFKA"):  # the damage: Rewind declares the Kafka provider's type again
    info = rewind_airflow.get_provider_info
    rewind_airflow.get_provider_info = lambda: {**info(), "connection-types": [
        {"connection-type": "kafka", "hook-class-name": "rewind_airflow.hooks.kafka.RewindKafkaHook"}]}
from airflow.providers_manager import ProvidersManager
pm = ProvidersManager()
hooks = pm.hooks
print(json.dumps({"providers": sorted(pm.providers), "kafka": hooks["kafka"].hook_class_name,
                  "kafka_package": hooks["kafka"].package_name}))
"""


def probe(tmp_path: Path, **env: str) -> tuple[dict[str, object], str]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}, "PYTHONPATH": str(ROOT),
            "AIRFLOW_HOME": str(tmp_path / "airflow"), **env}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def test_no_connection_type_clash_with_the_apache_kafka_provider(tmp_path: Path) -> None:
    facts, logs = probe(tmp_path)
    assert {"rewind", "apache-airflow-providers-apache-kafka"} <= set(facts["providers"]), facts  # type: ignore[arg-type]
    assert CLASH not in logs, logs[-3000:]
    assert facts["kafka"] == "airflow.providers.apache.kafka.hooks.base.KafkaBaseHook", facts
    damaged, logs = probe(tmp_path, REDECLARE_KAFKA="1")
    assert CLASH in logs and "'kafka'" in logs, "the probe did not see the clash it checks for"


KINDS = ("operators", "hooks", "sensors", "triggers")


def provider_classes() -> dict[str, dict[str, list[type]]]:
    """Every class of the package that Airflow's providers manager would list, by kind and module: found by
    importing each module of ``rewind_airflow`` (what it defines, not what it imports)."""
    import importlib
    import pkgutil

    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    import rewind_airflow

    found: dict[str, dict[str, list[type]]] = {kind: {} for kind in KINDS}
    for info in pkgutil.walk_packages(rewind_airflow.__path__, "rewind_airflow."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != module.__name__:
                continue
            kind = ("sensors" if issubclass(cls, BaseSensorOperator) else "operators" if issubclass(cls, BaseOperator)
                    else "hooks" if issubclass(cls, BaseHook) else "triggers" if issubclass(cls, BaseTrigger) else None)
            if kind:
                found[kind].setdefault(module.__name__, []).append(cls)
    return found


def operator_classes() -> list[type]:
    found = provider_classes()
    return [c for kind in ("operators", "sensors") for classes in found[kind].values() for c in classes]


def test_provider_info_lists_every_module_with_an_operator_hook_sensor_or_trigger() -> None:
    """``get_provider_info()`` names exactly the modules that define an operator, hook, sensor or trigger,
    each under its kind: a new module is not left out, a moved one not left behind."""
    import rewind_airflow

    info = rewind_airflow.get_provider_info()
    declared = {kind: sorted(m for entry in info.get(kind, []) for m in entry["python-modules"]) for kind in KINDS}
    found = {kind: sorted(modules) for kind, modules in provider_classes().items()}
    assert all(found.values()), f"the walk found no module of some kind: {found}"
    assert declared == found, f"get_provider_info() {declared} != the package's modules {found}"


def test_savepoint_proof_and_replay_are_operator_classes() -> None:
    names = {c.__name__ for c in operator_classes()}
    assert {"SavepointOperator", "SavepointRetentionOperator", "RestoreSavepointOperator", "ProveStreamOperator",
            "PlanReplayOperator", "ReplayOperator", "LaunchStreamOperator", "FirstBatchSensor",
            "UpgradeStreamOperator"} <= names, names


def test_every_parameter_of_every_operator_hook_sensor_and_trigger_is_documented() -> None:
    """Each ``__init__`` parameter (but ``**kwargs``, which go to Airflow's base class) has a ``:param NAME:``
    line in its class's docstring, as in Airflow's own providers. (Not parametrized over the classes: listing
    them imports Airflow, which must not happen while pytest collects; tests/conftest.py.)"""
    undocumented = {}
    classes = [c for modules in provider_classes().values() for found in modules.values() for c in found]
    assert len(classes) >= 15, classes
    for cls in classes:
        params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"
                  and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
        doc = cls.__doc__ or ""
        missing = [p.name for p in params if f":param {p.name}:" not in doc]
        if missing:
            undocumented[f"{cls.__module__}.{cls.__name__}"] = missing
    assert not undocumented, f"parameters without a :param: line: {undocumented}"


# -- the spark-submit commands, pinned -------------------------------------------------------------------------
# What a registry entry and a ``spark_default`` connection make Rewind run, through the tasks' own entry points
# (``launch``, ``launch_standby``, ``run_replay_task``), with the process start replaced: the detached launch's
# ``spawn_detached``, the Spark provider's ``subprocess.Popen``. Paths that depend on the machine are shown as
# <placeholders>; everything else is literal.

STREAM, BOOTSTRAP = "pin", "127.0.0.1:9092"
LOCAL = {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"}}
YARN_CLIENT = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client", "queue": "streams"}}
YARN_CLUSTER = {"conn_type": "spark", "host": "yarn", "extra": {
    "deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": "rm.example:8088"}}
S3 = {"conn_type": "aws", "login": "AKIAPINNED", "password": "pinned-secret-key",
      "extra": {"endpoint_url": "http://127.0.0.1:8333", "region_name": "eu-west-3", "bucket": "pinbucket"}}


def pin_registry(tmp_path: Path, checkpoint: str | None = None, standby: bool = False) -> Path:
    path = tmp_path / "pin.yaml"
    path.write_text(
        "streams:\n  pin:\n    topics: [pin-events]\n    transform: rewind.demo.transform:DemoTransform\n"
        f'    sink: {{url: "sqlite:///{tmp_path}/sink.db", table_prefix: pin_}}\n'
        f"    checkpoint: {checkpoint or tmp_path / 'checkpoints' / 'pin'}\n    status_dir: {tmp_path / 'status'}\n"
        + ("    supervision: {standby: true}\n" if standby else ""))
    return path


class Machine:
    """The machine-dependent parts of a command, and how to show them; the processes started (``started``)."""

    def __init__(self, tmp_path: Path) -> None:
        self.started: list[dict[str, Any]] = []
        from rewind.runtime.jars import connector_jars, s3a_jars
        from rewind.runtime.jvm import submit_jars
        from rewind.settings import jars_dir
        from spark_jobs import REPLAY_JOB, STREAM_JOB

        self.exact = {",".join(submit_jars(jdbc=False)): "<jars>",
                      ",".join(connector_jars(required=False)): "<connector-jars>", ":".join(s3a_jars()): "<s3a-jars>"}
        self.parts = sorted({str(STREAM_JOB): "<stream.py>", str(REPLAY_JOB): "<replay.py>", sys.executable: "<python>",
                             str(Path(sys.executable).parent): "<bin>", str(jars_dir()): "<jars-dir>",
                             str(tmp_path.resolve()): "<tmp>", str(tmp_path): "<tmp>", str(ROOT): "<checkout>"}.items(),
                            key=lambda kv: -len(kv[0]))

    def show(self, argv: list[str]) -> list[str]:
        import re

        out = []
        for arg in argv:
            arg = self.exact.get(arg, arg)
            arg = re.sub(r"/\S*/rewind-job-[0-9a-f]{16}\.zip", "<archive>", arg)
            arg = re.sub(r"/\S*/rewind-submit-[^/]+/spark\.properties", "<properties>", arg)
            for raw, shown in self.parts:
                arg = arg.replace(raw, shown)
            out.append(arg)
        return out


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    """An Airflow worker's environment with the Kafka and S3 connections, every launch's process start
    recorded instead of made (``worker.started``), and the driver reported running at once."""
    import types

    from airflow.providers.apache.spark.hooks import spark_submit

    import rewind.supervision.cluster_control as cluster_control
    import rewind.supervision.process_control as control

    machine = Machine(tmp_path)  # before PATH changes: the jars are compiled and found here
    for knob in ("REWIND_LAG_PROBE_S", "REWIND_DRIVER_WAIT_S", "REWIND_LEASE_TTL_S", "REWIND_FAULTS"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setenv("REWIND_SPARK_LOG_LEVEL", "INFO")  # a driver knob: it follows the driver into YARN
    monkeypatch.setenv("REWIND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", "/opt/site")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/worker-python")
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/opt/worker-python")
    monkeypatch.setenv("WORKER_MARK", "kept")
    monkeypatch.setenv("AIRFLOW_CONN_REWIND_KAFKA", json.dumps({"conn_type": "kafka",
                                                                "extra": {"bootstrap.servers": BOOTSTRAP}}))
    monkeypatch.setenv("AIRFLOW_CONN_REWIND_S3", json.dumps(S3))
    started = machine.started

    def spawn_detached(argv: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None) -> int:
        started.append({"how": "detached", "argv": argv, "env": env, "log": log_path})
        return 4242

    class Popen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            props = argv[argv.index("--properties-file") + 1] if "--properties-file" in argv else None
            started.append({"how": "provider", "argv": argv, "env": kwargs.get("env"),
                            "properties": Path(props).read_text() if props else None,
                            "properties_mode": Path(props).stat().st_mode & 0o777 if props else None})
            self.stdout = iter(["Submitted application application_1700000000000_0001\n"])

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(control, "spawn_detached", spawn_detached)
    monkeypatch.setattr(control, "ensure_no_driver", lambda spec: None)
    monkeypatch.setattr(control, "wait_running", lambda *a, **k: types.SimpleNamespace(pid=4243))
    monkeypatch.setattr(cluster_control, "wait_running_on_yarn", lambda *a, **k: (
        types.SimpleNamespace(pid=0), types.SimpleNamespace(app_id="application_1700000000000_0001",
                                                            tracking_url="http://rm.example:8088/proxy",
                                                            am_host="node1", am_container_logs=None)))
    monkeypatch.setattr(spark_submit, "subprocess", types.SimpleNamespace(**{
        **vars(spark_submit.subprocess), "Popen": Popen}))
    return machine


def use_spark(monkeypatch: pytest.MonkeyPatch, conn: dict[str, Any] | str | None) -> None:
    if conn is None:
        monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", conn if isinstance(conn, str) else json.dumps(conn))


TAIL = ["<stream.py>", STREAM, "--registry", "<tmp>/pin.yaml", "--bootstrap", BOOTSTRAP]
DETACHED = [
    # (connection, s3a checkpoint, the command)
    (LOCAL, False, ["spark-submit", "--master", "local[2]", "--jars", "<jars>", "--name", "rewind-pin",
                    "--deploy-mode", "client", *TAIL]),
    (YARN_CLIENT, True, ["spark-submit", "--master", "yarn", "--driver-class-path", "<s3a-jars>", "--jars", "<jars>",
                         "--name", "rewind-pin", "--queue", "streams", "--deploy-mode", "client", *TAIL]),
    ({"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077, "extra": {"spark-binary": "spark3-submit"}},
     False, ["spark3-submit", "--master", "spark://10.0.0.5:7077", "--jars", "<jars>", "--name", "rewind-pin", *TAIL]),
    ("spark://10.0.0.5:7077?deploy-mode=client", False,
     ["spark-submit", "--master", "spark://10.0.0.5:7077", "--jars", "<jars>", "--name", "rewind-pin",
      "--deploy-mode", "client", *TAIL]),
    ({"conn_type": "spark", "host": "local[*]"}, False,
     ["spark-submit", "--master", "local[*]", "--jars", "<jars>", "--name", "rewind-pin", *TAIL]),
    (None, False, ["spark-submit", "--master", "yarn", "--jars", "<jars>", "--name", "rewind-pin", *TAIL]),
]


@pytest.mark.parametrize("conn,on_s3a,command", DETACHED, ids=["local", "yarn-client", "standalone-port-apart",
                                                              "standalone-uri", "local-no-extra", "no-connection"])
def test_the_detached_launch_command_is_pinned(worker: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                conn: Any, on_s3a: bool, command: list[str]) -> None:
    """The supervisor's launch on this worker: spark-submit started detached, the command as pinned, in the
    worker's environment with this interpreter's spark-submit and Python."""
    from rewind_airflow.operators.supervision import launch

    use_spark(monkeypatch, conn)
    registry = pin_registry(tmp_path, "s3a://pinbucket/cp/pin" if on_s3a else None)
    done = launch(STREAM, str(registry), "spark_default", 5.0)
    assert done["submit_pid"] == 4242 and done["pid"] == 4243, done
    [started] = worker.started
    assert started["how"] == "detached"
    assert worker.show(started["argv"]) == command
    env = started["env"]
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable, "the replay's Python too"
    assert env["PYTHONPATH"] == f"{ROOT}{os.pathsep}/opt/site" and env["WORKER_MARK"] == "kept"


KEYTAB = base64.b64encode(b"not a real keytab").decode()


@pytest.mark.parametrize("conn", [c for c, _, _ in DETACHED] + [
    {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client", "principal": "rewind-conformance@EX",
                                                     "keytab": KEYTAB}}],
    ids=["local", "yarn-client", "standalone-port-apart", "standalone-uri", "local-no-extra", "no-connection",
         "kerberos"])
def test_the_detached_command_is_the_spark_providers_own(worker: Machine, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, conn: Any) -> None:
    """The command Rewind builds from the connection for a detached launch is the one the installed Spark
    provider's public ``SparkSubmitHook.submit`` runs for the same connection and options: a provider release
    that reads connections differently fails here, not in a stream's launch."""
    import tempfile

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from rewind.runtime.jvm import submit_jars
    from rewind_airflow.hooks.stream import RewindStreamHook, s3a_driver_class_path
    from spark_jobs import STREAM_JOB

    use_spark(monkeypatch, conn)
    registry = str(pin_registry(tmp_path, "s3a://pinbucket/cp/pin"))
    ours = RewindStreamHook(STREAM, registry, BOOTSTRAP, standby=True)
    try:
        SparkSubmitHook(conn_id="spark_default", jars=",".join(submit_jars(jdbc=False)), name=f"rewind-{STREAM}",
                        driver_class_path=s3a_driver_class_path(STREAM, registry),
                        application_args=ours.application_args()).submit(str(STREAM_JOB))
        [providers] = worker.started
        assert ours.submit_command() == providers["argv"]
    finally:
        (Path(tempfile.gettempdir()).resolve() / "airflow_keytab-rewind-conformance@EX").unlink(missing_ok=True)


def test_the_detached_standby_command_is_pinned(worker: Machine, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from rewind_airflow.operators.supervision import launch_standby

    use_spark(monkeypatch, LOCAL)
    done = launch_standby(STREAM, str(pin_registry(tmp_path, standby=True)), "spark_default")
    assert done["standby_submit_pid"] == 4242 and done["standby_launched"], done
    [started] = worker.started
    assert worker.show(started["argv"]) == ["spark-submit", "--master", "local[2]", "--jars", "<jars>", "--name",
                                            "rewind-pin", "--deploy-mode", "client", *TAIL, "--standby"]


def test_a_keytab_in_the_connection_is_written_and_passed(worker: Machine, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Kerberos as the Spark provider reads it: ``principal``, and ``keytab`` base64 in the extra, written to
    ``airflow_keytab-<principal>`` in the temporary directory."""
    import tempfile

    from rewind_airflow.operators.supervision import launch

    principal = f"rewind-pin-{os.getpid()}@EXAMPLE.COM"
    keytab = Path(tempfile.gettempdir()).resolve() / f"airflow_keytab-{principal}"
    use_spark(monkeypatch, {"conn_type": "spark", "host": "yarn", "extra": {
        "deploy-mode": "client", "principal": principal, "keytab": KEYTAB}})
    try:
        launch(STREAM, str(pin_registry(tmp_path)), "spark_default", 5.0)
        [started] = worker.started
        assert worker.show(started["argv"]) == [
            "spark-submit", "--master", "yarn", "--jars", "<jars>", "--keytab", str(keytab), "--principal", principal,
            "--name", "rewind-pin", "--deploy-mode", "client", *TAIL]
        assert keytab.read_bytes() == b"not a real keytab"
    finally:
        keytab.unlink(missing_ok=True)


CLUSTER_CONF = ["spark.yarn.maxAppAttempts=1", "spark.yarn.submit.waitAppCompletion=false",
                "spark.yarn.tags=rewind,rewind-stream-pin", "spark.yarn.appMasterEnv.PYTHONPATH={{PWD}}/rewind_job",
                "spark.executorEnv.PYTHONPATH={{PWD}}/rewind_job",
                "spark.yarn.appMasterEnv.AWS_ENDPOINT_URL=http://127.0.0.1:8333",
                "spark.yarn.appMasterEnv.AWS_REGION=eu-west-3", "spark.yarn.appMasterEnv.REWIND_JARS=<jars-dir>",
                "spark.yarn.appMasterEnv.REWIND_S3_BUCKET=pinbucket",
                "spark.yarn.appMasterEnv.REWIND_S3_ENDPOINT=http://127.0.0.1:8333",
                "spark.yarn.appMasterEnv.REWIND_SPARK_LOG_LEVEL=INFO"]


@pytest.mark.parametrize("standby", [False, True], ids=["driver", "standby"])
def test_the_yarn_cluster_submit_is_pinned(worker: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           standby: bool) -> None:
    """The supervisor's launch on a YARN cluster-mode connection: the Spark provider's ``submit`` runs the
    command as pinned, S3's keys only in the 0600 properties file, and none of the worker's Python settings."""
    from rewind_airflow.operators.supervision import launch, launch_standby

    use_spark(monkeypatch, YARN_CLUSTER)
    registry = str(pin_registry(tmp_path, "s3a://pinbucket/cp/pin", standby=standby))
    if standby:
        monkeypatch.setattr("rewind.control.driver_lease.read_standby", lambda spec: None)
        done = launch_standby(STREAM, registry, "spark_default")
        assert done == {"standby_launched": True, "standby_tag": "rewind-stream-pin"}, done
    else:
        done = launch(STREAM, registry, "spark_default", 5.0)
        assert done["app_id"] == "application_1700000000000_0001" and done["node"] == "node1", done
    [started] = worker.started
    assert started["how"] == "provider"
    conf = [arg for c in CLUSTER_CONF for arg in ("--conf", c)]
    assert worker.show(started["argv"]) == [
        "spark-submit", "--master", "yarn", *conf, "--properties-file", "<properties>", "--files", "<tmp>/pin.yaml",
        "--archives", "<archive>#rewind_job", "--driver-class-path", "<s3a-jars>", "--jars", "<jars>",
        "--name", "rewind-pin", "--deploy-mode", "cluster", "<stream.py>", STREAM, "--registry", "pin.yaml",
        "--bootstrap", BOOTSTRAP, *(["--standby"] if standby else [])]
    assert "pinned-secret-key" not in " ".join(started["argv"]) and started["properties_mode"] == 0o600
    assert "spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY pinned-secret-key" in started["properties"]
    assert "spark.yarn.appMasterEnv.AWS_ACCESS_KEY_ID AKIAPINNED" in started["properties"]
    env = started["env"]
    assert not {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"} & set(env), sorted(env)
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"
    assert env["WORKER_MARK"] == "kept"


@pytest.mark.parametrize("conn,confs", [
    (LOCAL, []),
    (YARN_CLIENT, ["spark.yarn.appMasterEnv.PYSPARK_PYTHON=<python>",
                   "spark.yarn.appMasterEnv.PYSPARK_DRIVER_PYTHON=<python>",
                   "spark.yarn.appMasterEnv.PATH=<bin>:/usr/bin:/bin",
                   "spark.yarn.appMasterEnv.PYTHONPATH=<checkout>:/opt/site"]),
], ids=["local", "yarn-client"])
def test_the_replay_submit_is_pinned(worker: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     conn: dict[str, Any], confs: list[str]) -> None:
    """The replay task's bounded job through the Spark provider's ``submit``: the command as pinned, run with
    this interpreter's Python and the checkout on ``PYTHONPATH``."""
    from airflow.sdk.exceptions import AirflowFailException

    from rewind_airflow.operators.replay import run_replay_task

    use_spark(monkeypatch, conn)
    run = tmp_path / "run"
    run.mkdir()
    planned = {"run_dir": str(run), "plan_file": str(run / "plan.json"), "replay_id": "r1"}
    with pytest.raises(AirflowFailException, match="wrote no report"):
        run_replay_task(planned, {"stream": STREAM}, str(pin_registry(tmp_path)), "spark_default")
    [started] = worker.started
    extra = ["--queue", "streams"] if conn is YARN_CLIENT else []
    assert worker.show(started["argv"]) == [
        "spark-submit", "--master", conn["host"], *[arg for c in confs for arg in ("--conf", c)],
        "--jars", "<connector-jars>", "--name", "rewind-replay-pin", *extra, "--deploy-mode", "client",
        "<replay.py>", STREAM, "--registry", "<tmp>/pin.yaml", "--bootstrap", BOOTSTRAP,
        "--plan-json", "<tmp>/run/plan.json", "--mode", "into-sink", "--replay-id", "r1", "--run-dir", "<tmp>/run"]
    env = started["env"]
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["PYTHONPATH"] == f"{ROOT}{os.pathsep}/opt/site" and env["WORKER_MARK"] == "kept"
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"
