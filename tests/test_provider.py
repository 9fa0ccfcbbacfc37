"""A provider that plays well: no connection type taken from the Apache Kafka provider, and operator classes
whose every parameter is documented.

The clash check runs Airflow's own providers manager in a fresh process (both providers installed, as
requirements.txt pins them) and reads what it logs; the same probe with Rewind declaring ``kafka`` again
shows the warning it looks for, so the check cannot pass by not seeing it.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

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


def operator_classes() -> list[type]:
    from airflow.sdk import BaseOperator

    import rewind_airflow.operators.proof as proof
    import rewind_airflow.operators.replay as replay
    import rewind_airflow.operators.savepoint as savepoint
    import rewind_airflow.operators.supervision as supervision
    import rewind_airflow.operators.upgrade as upgrade
    import rewind_airflow.sensors.committed as committed
    import rewind_airflow.sensors.stream as stream

    return [c for m in (proof, replay, savepoint, supervision, upgrade, committed, stream) for c in vars(m).values()
            if isinstance(c, type) and issubclass(c, BaseOperator) and c.__module__ == m.__name__]


def test_savepoint_proof_and_replay_are_operator_classes() -> None:
    names = {c.__name__ for c in operator_classes()}
    assert {"SavepointOperator", "SavepointRetentionOperator", "RestoreSavepointOperator", "ProveStreamOperator",
            "PlanReplayOperator", "ReplayOperator", "LaunchStreamOperator", "FirstBatchSensor",
            "UpgradeStreamOperator"} <= names, names


def test_every_operator_parameter_is_documented() -> None:
    """(Not parametrized over the classes: listing them imports Airflow, which must not happen while
    pytest collects; tests/conftest.py.)"""
    undocumented = {}
    for cls in operator_classes():
        params = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        doc = cls.__doc__ or ""
        missing = [p.name for p in params if f":param {p.name}:" not in doc]
        if missing:
            undocumented[cls.__name__] = missing
    assert not undocumented, f"parameters without a :param: line: {undocumented}"
