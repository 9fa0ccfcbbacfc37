"""An Airflow installed the way MWAA and Composer build theirs, built once per test run and shared.

A fresh virtualenv gets Airflow from a requirements file: the Spark provider pinned, and Rewind as a built
wheel (``rewind[airflow] @ file://.../rewind-*.whl``), the repository's requirements.txt as constraints. No
full PySpark (the Spark provider's pyspark-client only), nothing of the checkout on its path. Its ``dags/``
and ``plugins/`` folders are copies of the repository's.

Built once for the whole run (about 40 s quiet): under pytest-xdist every worker asks, the first builds
under a file lock in the run's shared temp folder, the others wait for it and reuse it. ``tests/test_install.py``
checks what the install holds; ``tests/test_yarn.py`` upgrades a stream on YARN from it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class MwaaInstall:
    """The install: its Python, the wheel it came from, its dags and plugins folders, and the environment it
    was built in (the test process's, without PYTHONPATH, AIRFLOW_* and REWIND_*)."""

    root: Path
    python: Path
    wheel: Path
    dags: Path
    plugins: Path
    env: dict[str, str]

    @property
    def site_packages(self) -> Path:
        return next((self.root / "venv" / "lib").glob("python3*/site-packages"))


def pins(*names: str) -> list[str]:
    """``name==version`` of each name, as requirements.txt pins it."""
    text = (ROOT / "requirements.txt").read_text()
    out = []
    for name in names:
        m = re.search(rf"^{re.escape(name)}==(\S+)", text, re.M)
        assert m, f"{name} is not pinned in requirements.txt"
        out.append(f"{name}=={m.group(1)}")
    return out


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "AIRFLOW", "REWIND_"))}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # test tooling: waits as long as the build takes
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The run's folder every xdist worker sees (each worker's base temp is a child of it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _build(root: Path) -> MwaaInstall:
    env = clean_env()
    venv = root / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True,
                   timeout=120)
    src = root / "src"  # a copy: setuptools builds in the source tree (build/), not in the checkout
    src.mkdir()
    for part in ("pyproject.toml", "README.md", "rewind", "rewind_airflow", "spark_jobs"):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / part, src / part)
    wheels = root / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, timeout=600, env=env, cwd=root)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheel = next(wheels.glob("rewind-*.whl"))
    requirements = root / "requirements.txt"  # as an MWAA environment's requirements.txt pins its packages
    requirements.write_text("\n".join([*pins("apache-airflow", "apache-airflow-providers-apache-spark"),
                                       f"rewind[airflow] @ {wheel.as_uri()}"]) + "\n")
    python = venv / "bin" / "python"
    # --no-compile: the modules a test imports are compiled when first imported; compiling all of them here
    # took 21 of the build's 61 s (quiet, 2026-11-30)
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-c",
                              str(ROOT / "requirements.txt"), "-r", str(requirements)], capture_output=True, text=True,
                             timeout=1500, env=env, cwd=root)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    folders = root / "mwaa"
    for name in ("dags", "plugins"):
        shutil.copytree(ROOT / name, folders / name, ignore=shutil.ignore_patterns("__pycache__"))
    return MwaaInstall(root, python, wheel, folders / "dags", folders / "plugins", env)


def mwaa_install(factory: pytest.TempPathFactory) -> MwaaInstall:
    """The run's MWAA-style install (built by the first caller, see the module docstring)."""
    root = shared_root(factory) / "mwaa-install"
    done = root / "built.json"
    with _locked(shared_root(factory) / "mwaa-install.lock"):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a build that broke half-way
            root.mkdir(parents=True)
            install = _build(root)
            done.write_text(json.dumps({"wheel": str(install.wheel)}))
    wheel = Path(json.loads(done.read_text())["wheel"])
    return MwaaInstall(root, root / "venv" / "bin" / "python", wheel, root / "mwaa" / "dags", root / "mwaa" / "plugins",
                       clean_env())
