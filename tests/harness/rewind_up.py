"""`rewind up` as a newcomer runs it, for the end-to-end tests that need the whole platform."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from rewind.control.status import read_status
from rewind.runtime.processes import pid_alive

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"  # Debian's package: Playwright drives it (its own browser download fails here)


def newcomer_env(home: Path) -> dict[str, str]:
    """A newcomer's shell: no REWIND_/AIRFLOW settings inherited, only REWIND_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "AIRFLOW"))}
    return {**env, "REWIND_HOME": str(home)}


class RewindUp:
    """`rewind up` on a fresh REWIND_HOME (no REWIND_/AIRFLOW settings inherited), its output collected,
    stopped with Ctrl-C as a person would."""

    def __init__(self, home: Path, rate: int = 300) -> None:
        self.home = home
        self.started_at = time.time()  # wall clock: what the no-false-alarm window counts from
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "rewind"), "up", "--rate", str(rate)],
                                     cwd=ROOT, env=newcomer_env(home), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self._lines.extend(iter(self.proc.stdout.readline, "")),  # type: ignore[union-attr]
                                        daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def running(self) -> bool:
        return self.proc.poll() is None

    def interrupt(self, timeout: float = 180) -> None:
        """Ctrl-C (SIGINT to its process group) and wait; SIGKILL and raise if it does not stop in time."""
        try:
            if self.running():
                os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                raise
        finally:
            self._reader.join(timeout=10)

    def assert_stopped_cleanly(self, stream_pids: Iterable[int | None]) -> None:
        out = self.output
        assert self.proc.returncode == 0, out[-4000:]
        assert "stopped everything that was started." in out
        for pid in set(stream_pids) - {None}:
            assert not pid_alive(pid), f"the demo stream (pid {pid}) outlived `rewind up`"
        left = subprocess.run(["pgrep", "-f", str(self.home)], capture_output=True, text=True).stdout.split()
        assert not left, f"processes still running from {self.home}: {left}"


def _rewind_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "rewind"), *args], cwd=ROOT,
                          env=newcomer_env(home), capture_output=True, text=True, timeout=300)


def check_the_newcomers_promises(up: RewindUp, deadline: float) -> dict[str, int | None]:
    """What the README promises of `rewind up`, checked while it runs: the demo stream at batch >= 2 on
    Spark's Kafka connector, a generated login printed and kept in a 0600 file, `rewind verify demo`
    proving it up to the last committed batch, the inventory stream beside it proven from its contract,
    and the registry's savepoint, DQ and supervisor DAGs unpaused, and no false alarm for its first 5
    minutes: no DQ run failed, no FAIL on the page (``harness.no_false_alarm``). Returns the streams' pids,
    which Ctrl-C must stop. Shared by test_make_up and test_ui_browser (one `rewind up` serves both in CI)."""
    home = up.home
    status_file = home / "checkpoints" / "demo.control" / "demo.json"  # beside the checkpoint (streams.yaml)
    inventory_file = home / "checkpoints" / "inventory.control" / "inventory.json"
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
    # The README's promise: `rewind verify demo` while it runs proves up to the last committed batch.
    verify = _rewind_cli(home, "verify", "demo", "--json")  # the summary alone on stdout (the verdict: stderr)
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
    verify = _rewind_cli(home, "verify", "inventory", "--json")
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    inv_report = json.loads(verify.stdout)
    assert inv_report["ok"] and inv_report["sink_rows"] > 0 and inv_report["sink_dead_letters"] > 0, inv_report
    # The registry's savepoint and DQ schedules are live on the embedded default, not paused.
    from rewind.runtime.airflow_client import AirflowClient

    client = AirflowClient(ui.group(1), ui.group(2), ui.group(3))
    for dag_id in ("rewind_demo_savepoint", "rewind_demo_dq", "rewind_demo_supervisor",
                   "rewind_inventory_savepoint", "rewind_inventory_dq", "rewind_inventory_supervisor"):
        dag = client.get_dag(dag_id)
        assert dag["is_paused"] is False, (dag_id, dag)
    from harness.no_false_alarm import check_no_false_alarm

    seen = check_no_false_alarm(ui.group(1), ui.group(2), ui.group(3), home, up.started_at)
    print("no false alarm: " + json.dumps(seen, default=str)[:2000], flush=True)
    return {"demo": st.pid, "inventory": inv.pid}
