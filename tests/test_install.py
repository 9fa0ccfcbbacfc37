"""Rewind installs into an Airflow it did not come with: `pip install rewind[airflow]` gives the DAGs and the page.

A fresh virtualenv gets Airflow 3.3 and its Spark provider (the versions requirements.txt pins), then
this repository as a plain (not editable) package. In that venv, from a directory outside the
checkout and with no PYTHONPATH: the five-line DAG file imports and builds every registry stream's
DAGs, the Rewind page is a registered plugin (entry point ``airflow.plugins``), and the provider
info names the package. Nothing of the repository's folders is on the path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def pins(*names: str) -> list[str]:
    text = (ROOT / "requirements.txt").read_text()
    out = []
    for name in names:
        m = re.search(rf"^{re.escape(name)}==(\S+)", text, re.M)
        assert m, f"{name} is not pinned in requirements.txt"
        out.append(f"{name}=={m.group(1)}")
    return out


def test_the_package_installs_into_a_fresh_airflow(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "AIRFLOW", "REWIND_"))}
    src = tmp_path / "src"  # a copy: setuptools builds in the source tree (build/), not in the checkout
    src.mkdir()
    for part in ("pyproject.toml", "README.md", "rewind", "rewind_airflow"):
        copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy
        extra = {"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / part).is_dir() else {}
        copy(ROOT / part, src / part, **extra)
    install = subprocess.run(
        [py, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "requirements.txt"),
         *pins("apache-airflow", "apache-airflow-providers-apache-spark"), f"{src}[airflow]"],
        capture_output=True, text=True, timeout=1500, env=env, cwd=tmp_path)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "rewind_streams.py").write_text((ROOT / "dags" / "rewind_streams.py").read_text())
    env.update({"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__PLUGINS_FOLDER": str(tmp_path / "plugins"),
                "REWIND_REGISTRY": str(ROOT / "streams.yaml"), "REWIND_HOME": str(tmp_path / "rewind")})
    probe = """
import json, sys
import rewind, rewind_airflow
assert "/site-packages/" in rewind.__file__ and "/site-packages/" in rewind_airflow.__file__, rewind.__file__
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
from airflow import plugins_manager
names = sorted(p["name"] for p in plugins_manager.get_plugin_info())
from airflow.providers_manager import ProvidersManager
providers = sorted(ProvidersManager().providers)
ProvidersManager().hooks  # registers the connection types: a clash is logged here
print(json.dumps({"errors": bag.import_errors, "dags": sorted(bag.dag_ids), "plugins": names,
                  "providers": providers, "path": sys.path}))
"""
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert not any(str(ROOT) in p for p in facts["path"]), facts["path"]
    assert facts["errors"] == {}, facts["errors"]
    assert {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq", "rewind_replay"} <= set(facts["dags"])
    assert "rewind" in facts["plugins"], facts["plugins"]
    assert "rewind" in facts["providers"], facts["providers"]
    # the [airflow] extra brings the Apache Kafka provider, which owns the connection type `kafka`
    assert "apache-airflow-providers-apache-kafka" in facts["providers"], facts["providers"]
    assert "has been already registered" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
