"""Rewind installs into an Airflow it did not come with, the two ways Airflow deployments take packages.

One fresh virtualenv gets Airflow 3.3 from a requirements file the way MWAA and Composer build theirs: the
Spark provider pinned, and Rewind as a built wheel (``rewind[airflow] @ file://.../rewind-*.whl``), with the
repository's requirements.txt as constraints (built once for the run, ``tests/harness/mwaa.py``: test_yarn
upgrades a stream on YARN from it). Nothing of the checkout is on its path afterwards. Then, from a directory
outside the checkout and with no PYTHONPATH:

- the ``pip install`` deployment: the five-line DAG file in the dags folder, an empty plugins folder; the DAGs
  build from the registry, the Rewind page is a registered plugin (entry point ``airflow.plugins``) and the
  provider info names the package;
- the MWAA deployment: the dags folder and the plugins folder are copies of the repository's ``dags/`` and
  ``plugins/`` and nothing else; the DAGs import, the page is registered once (no import error for a plugin
  registered twice), and the Airflow side has no full pyspark (the Spark provider's pyspark-client only) yet
  imports what supervises, takes savepoints, proves and plans replays;
- the same folders with the wheel's entry point hidden (a deployment that ships the package without its
  metadata): the page is registered by ``plugins/`` alone.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from harness.mwaa import mwaa_install

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


PROBE = """
import json, os, sys
import rewind, rewind_airflow
assert "/site-packages/" in rewind.__file__ and "/site-packages/" in rewind_airflow.__file__, rewind.__file__
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
from airflow import plugins_manager
plugins = plugins_manager.get_plugin_info()
from airflow.providers_manager import ProvidersManager
providers = sorted(ProvidersManager().providers)
ProvidersManager().hooks  # registers the connection types: a clash is logged here
# what the Airflow side runs besides launching: supervision, savepoints, proofs, replay plans
import rewind_airflow.operators.supervision, rewind_airflow.operators.savepoint, rewind_airflow.operators.proof
import rewind_airflow.operators.replay, rewind.checkpoints.savepoints, rewind.supervision.observe
import rewind.replay.planner, rewind.proof.verify, rewind.proof.dq
import pyspark
print(json.dumps({"errors": bag.import_errors, "dags": sorted(bag.dag_ids),
                  "plugins": [(p["name"], str(p.get("source"))) for p in plugins],
                  "plugin_errors": plugins_manager.get_import_errors(), "providers": providers, "path": sys.path,
                  "full_pyspark": os.path.isdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}))
"""


def test_the_package_installs_into_a_fresh_airflow_from_a_wheel(tmp_path: Path,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    install = mwaa_install(tmp_path_factory)  # built once for the run (tests/harness/mwaa.py)
    py, env, wheel = str(install.python), install.env, install.wheel
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()  # test tooling stays out of what every install takes (issue 35)
    assert not [n for n in names if n.startswith(("tests/", "rewind/testing/")) or "/harness/" in n], names
    assert "rewind/api/__init__.py" in names and "rewind/storage/base.py" in names

    def probe(dags: Path, plugins: Path) -> dict:
        run_env = {**env, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                   "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
                   "REWIND_REGISTRY": str(ROOT / "streams.yaml"), "REWIND_HOME": str(tmp_path / "rewind")}
        out = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, timeout=600, env=run_env,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        facts = json.loads(out.stdout.strip().splitlines()[-1])
        assert not any(str(ROOT) in p for p in facts["path"]), facts["path"]
        assert facts["errors"] == {} and facts["plugin_errors"] == {}, (facts["errors"], facts["plugin_errors"])
        assert {"rewind_demo_supervisor", "rewind_demo_savepoint", "rewind_demo_dq",
                "rewind_replay"} <= set(facts["dags"])
        assert [name for name, _ in facts["plugins"]].count("rewind") == 1, facts["plugins"]
        assert "has been already registered" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
        return dict(facts)

    # pip install: the DAG file alone, the page from the entry point
    pip_dags, no_plugins = tmp_path / "pip-dags", tmp_path / "no-plugins"
    pip_dags.mkdir()
    no_plugins.mkdir()
    shutil.copy(ROOT / "dags" / "rewind_streams.py", pip_dags)
    facts = probe(pip_dags, no_plugins)
    assert "rewind" in facts["providers"], facts["providers"]
    # the [airflow] extra brings the Apache Kafka provider, which owns the connection type `kafka`
    assert "apache-airflow-providers-apache-kafka" in facts["providers"], facts["providers"]

    # MWAA: copies of dags/ and plugins/, nothing else of the checkout
    facts = probe(install.dags, install.plugins)
    assert not facts["full_pyspark"], "the Airflow side pulled in full pyspark (jars): it needs pyspark-client only"
    assert "$PLUGINS_FOLDER" not in dict(facts["plugins"])["rewind"]  # the entry point's; the folder stood aside

    # the same folders, the wheel's entry point hidden: plugins/ registers the page by itself
    entry_points = next(install.site_packages.glob("rewind-*.dist-info/entry_points.txt"))
    text = entry_points.read_text()
    entry_points.write_text(re.sub(r"\[airflow\.plugins\][^\[]*", "", text))
    try:
        facts = probe(install.dags, install.plugins)
    finally:  # the install is the run's: the other tests get it as built
        entry_points.write_text(text)
    assert dict(facts["plugins"])["rewind"] == "$PLUGINS_FOLDER/rewind_plugin.py", facts["plugins"]
