"""The newcomer's first command: `rewind up` (what `make up` runs) on a fresh REWIND_HOME.

It must start the embedded platform and Airflow, have Airflow launch the demo stream, print the
UI address and a generated login, show batches flowing, and on Ctrl-C stop everything it started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rewind.status import read_status

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_rewind_up_runs_the_demo_under_airflow_and_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "AIRFLOW"))}
    env["REWIND_HOME"] = str(home)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rewind"), "up", "--rate", "300"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    status_file = home / "status" / "demo.json"
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and proc.poll() is None:
            st = read_status(status_file)
            if st and st.state == "running" and (st.last_batch_id or 0) >= 2 and st.lag_at:
                break
            time.sleep(1)
        out = "".join(lines)
        assert proc.poll() is None, f"rewind up exited early:\n{out}"
        st = read_status(status_file)
        assert st and st.state == "running" and (st.last_batch_id or 0) >= 2, out[-4000:]
        ui = re.search(r"Airflow UI\s+(http://\S+)\s+user (\S+), password (\S+)", out)
        assert ui, out
        assert ui.group(3) not in (ROOT / "README.md").read_text() and len(ui.group(3)) >= 16  # generated
        pw_file = re.search(r"kept in (\S+), mode 0600", out)
        assert pw_file and Path(pw_file.group(1)).stat().st_mode & 0o077 == 0, out
        assert ui.group(3) in Path(pw_file.group(1)).read_text()
        stream_pid = st.pid
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    reader.join(timeout=10)
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    assert "stopped everything that was started." in out
    from rewind.services import pid_alive

    assert not pid_alive(stream_pid), "the demo stream outlived `rewind up`"
    left = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes still running from {home}: {left}"
