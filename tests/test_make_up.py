"""The newcomer's first command: `rewind up` (what `make up` runs) on a fresh REWIND_HOME.

It must start the embedded platform and Airflow, have Airflow launch the demo stream and the
inventory stream beside it, print the UI address and a generated login, show batches flowing, and
on Ctrl-C stop everything it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rewind_up_process import ROOT, RewindUp

from rewind.stream.status import read_status


@pytest.mark.slow
def test_rewind_up_runs_the_demo_under_airflow_and_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = RewindUp(home)
    status_file = home / "status" / "demo.json"
    inventory_file = home / "status" / "inventory.json"
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and up.running():
            st = read_status(status_file)
            if st and st.state == "running" and (st.last_batch_id or 0) >= 2 and st.lag_at:
                break
            time.sleep(1)
        out = up.output
        assert up.running(), f"rewind up exited early:\n{out}"
        st = read_status(status_file)
        assert st and st.state == "running" and (st.last_batch_id or 0) >= 2, out[-4000:]
        ui = re.search(r"Airflow UI\s+(http://\S+)\s+user (\S+), password (\S+)", out)
        assert ui, out
        assert ui.group(3) not in (ROOT / "README.md").read_text() and len(ui.group(3)) >= 16  # generated
        pw_file = re.search(r"kept in (\S+), mode 0600", out)
        assert pw_file and Path(pw_file.group(1)).stat().st_mode & 0o077 == 0, out
        assert ui.group(3) in Path(pw_file.group(1)).read_text()
        assert st.source and st.source.startswith("KafkaV2"), f"not Spark's Kafka connector: {st.source}"
        stream_pid = st.pid
        # The README's promise: `rewind verify demo` while it runs proves up to the last committed batch.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "AIRFLOW"))}
        verify = subprocess.run([str(Path(sys.executable).parent / "rewind"), "verify", "demo"], cwd=ROOT,
                                env={**env, "REWIND_HOME": str(home)}, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in verify.stderr, verify.stderr
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        report = json.loads(verify.stdout)
        assert report["ok"] and report["kafka_records"] > 0 and report["sink_events"] > 0, report
        # The second stream, under its own supervisor DAG, proven from its contract while it runs.
        while time.monotonic() < deadline and up.running():
            inv = read_status(inventory_file)
            if inv and inv.state == "running" and (inv.last_batch_id or 0) >= 1:
                break
            time.sleep(1)
        inv = read_status(inventory_file)
        assert inv and inv.state == "running" and (inv.last_batch_id or 0) >= 1, up.output[-4000:]
        inventory_pid = inv.pid
        verify = subprocess.run([str(Path(sys.executable).parent / "rewind"), "verify", "inventory"], cwd=ROOT,
                                env={**env, "REWIND_HOME": str(home)}, capture_output=True, text=True, timeout=300)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        inv_report = json.loads(verify.stdout)
        assert inv_report["ok"] and inv_report["sink_rows"] > 0 and inv_report["sink_dead_letters"] > 0, inv_report
        # The registry's savepoint and DQ schedules are live on the embedded default, not paused.
        from rewind.platform.airflow_client import AirflowClient

        client = AirflowClient(ui.group(1), ui.group(2), ui.group(3))
        for dag_id in ("rewind_demo_savepoint", "rewind_demo_dq", "rewind_demo_supervisor",
                       "rewind_inventory_savepoint", "rewind_inventory_dq", "rewind_inventory_supervisor"):
            dag = client.get_dag(dag_id)
            assert dag["is_paused"] is False, (dag_id, dag)
    finally:
        up.interrupt()
    up.assert_stopped_cleanly([stream_pid, inventory_pid])
