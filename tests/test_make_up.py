"""The newcomer's first command: `rewind up` (what `make up` runs) on a fresh REWIND_HOME.

It must start the embedded platform and Airflow, have Airflow launch the demo stream and the
inventory stream beside it, print the UI address and a generated login, show batches flowing, and
on Ctrl-C stop everything it started (``harness.rewind_up.check_the_newcomers_promises``).

Where Chromium is installed (CI installs it), tests/test_ui_browser.py makes the same checks on the
`rewind up` it drives the browser against, and this test is skipped: one `rewind up` instead of two
took about 250 s off CI (2 workers). Without Chromium, this test is the one that runs them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness.rewind_up import CHROMIUM, RewindUp, check_the_newcomers_promises


@pytest.mark.slow
def test_rewind_up_runs_the_demo_under_airflow_and_stops_cleanly(tmp_path: Path) -> None:
    if Path(CHROMIUM).exists():
        pytest.skip("tests/test_ui_browser.py checks the same promises on its own `rewind up` (Chromium is here)")
    up = RewindUp(tmp_path / "home")
    try:
        pids = check_the_newcomers_promises(up, time.monotonic() + 420)
    finally:
        up.interrupt()
    up.assert_stopped_cleanly(pids.values())
