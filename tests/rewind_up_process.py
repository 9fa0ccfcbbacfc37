"""`rewind up` as a newcomer runs it, for the end-to-end tests that need the whole platform."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from rewind.platform.processes import pid_alive

ROOT = Path(__file__).resolve().parents[1]


class RewindUp:
    """`rewind up` on a fresh REWIND_HOME (no REWIND_/AIRFLOW settings inherited), its output collected,
    stopped with Ctrl-C as a person would."""

    def __init__(self, home: Path, rate: int = 300) -> None:
        self.home = home
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "AIRFLOW"))}
        env["REWIND_HOME"] = str(home)
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "rewind"), "up", "--rate", str(rate)],
                                     cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
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
