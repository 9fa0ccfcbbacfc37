"""In Airflow, a refusal fails the task without retries; a failure is left to Airflow's retries.

Run in a child interpreter with its own AIRFLOW_HOME: importing Airflow here would load its
configuration for the whole pytest process (the default ~/airflow), and later modules that set
up their own Airflow home before the first import (tests/test_dags.py) would run against it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHECK = """
import pytest
from airflow.sdk.exceptions import AirflowFailException

from rewind.errors import Failed, Refused
from rewind.supervision.failures import CrashLoop
from rewind_airflow.errors import fail_without_retry_on_refusal

for refused in (Refused("bad range: from after to"), CrashLoop("crash loop: 6 failures at batch 4")):
    with pytest.raises(AirflowFailException, match=str(refused)[:20]):
        with fail_without_retry_on_refusal():
            raise refused
with pytest.raises(Failed):  # Airflow retries it as configured
    with fail_without_retry_on_refusal():
        raise Failed("Kafka did not answer")
with pytest.raises(KeyError):  # not Rewind's: untouched
    with fail_without_retry_on_refusal():
        raise KeyError("x")
print("checked")
"""


def test_refusal_fails_without_retry_and_failure_is_retried(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and "checked" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


def test_no_test_module_imports_airflow_into_the_pytest_process() -> None:
    """Guard for the above: Airflow, if this process imported it, loaded the throwaway home conftest.py
    set, never the user's ~/airflow."""
    if "airflow" in sys.modules:
        from airflow.configuration import AIRFLOW_HOME

        assert os.path.realpath(AIRFLOW_HOME) == os.path.realpath(os.environ["AIRFLOW_HOME"]), AIRFLOW_HOME
        assert os.path.realpath(AIRFLOW_HOME) != os.path.realpath(os.path.expanduser("~/airflow"))


def test_collecting_the_suite_does_not_import_airflow() -> None:
    """test_dags' dag.test() needs Airflow imported after its settings (tests/conftest.py), so no test
    module may import Airflow while pytest collects it: at module level, in a class's bases, or in a
    parametrize list. A CI rehearsal (2026-11-27) failed 10 of test_dags' 15 tests on one such module."""
    tests = Path(__file__).resolve().parent
    modules = sorted(p.stem for p in tests.glob("test_*.py"))
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules) +
            "print([m for m in sys.modules if m == 'airflow' or m.startswith(('airflow.', 'rewind_airflow'))][:5])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tests,
                         env={**os.environ, "PYTHONPATH": f"{tests.parent}{os.pathsep}{tests}"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"imported while collecting: {out.stdout[-500:]}"
