"""No false alarm on a fresh `rewind up`: for its first minutes no DQ run fails and the Rewind page shows no FAIL.

Called by the shared `rewind up` test (tests/test_ui_browser.py, through tests/harness/rewind_up.py) with what
`rewind up` printed: the Airflow URL and login, its REWIND_HOME and when it started. It judges from what
persists (the DQ DAG runs and their task instances in Airflow, the proof files under ``REWIND_HOME/dq``) and
from the page's API, polled until ``started_at + window_s``: called late, it returns after one look, and the
history still covers the whole window. Before the fix, the DQ DAGs' first runs (fired when they were unpaused,
before either stream had committed a batch) failed within a minute with thousands of records "missing". """

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: What a DQ run's tasks may be while nothing is wrong: waiting for the first batch, proving, passed,
#: skipped (nothing to prove). A failed task, or a failed run, is the false alarm this guards against.
QUIET_TASK_STATES = (None, "scheduled", "queued", "running", "up_for_reschedule", "success", "skipped",
                     "deferred", "none")


def check_no_false_alarm(airflow_url: str, username: str, password: str, home: Path, started_at: float,
                         window_s: float = 300.0, streams: Sequence[str] = ("demo", "inventory"),
                         poll_s: float = 10.0, settle_s: float = 240.0) -> dict[str, Any]:
    """Assert, until ``started_at + window_s`` (``time.time()`` seconds), that no DQ run of ``streams`` fails,
    no proof under ``home/dq`` failed and the Rewind page shows no FAIL; then wait up to ``settle_s`` for
    the DQ runs of the window still in flight (a proof started in minute 4 that fails in minute 6 is the
    same false page) and look once more. Returns what was seen.

    :param airflow_url: Airflow's URL as `rewind up` printed it (``http://127.0.0.1:PORT``)
    :param username: the login `rewind up` printed
    :param password: its password
    :param home: the REWIND_HOME `rewind up` runs on
    :param started_at: when `rewind up` was started (wall clock)
    :param window_s: how long after the start nothing may fail (the issue's "first 5 minutes")
    :param streams: the registry's streams (`rewind up` runs the demo and the inventory)
    :param poll_s: seconds between looks at the page
    :param settle_s: how long to wait for the window's DQ runs still in flight (0: not at all)
    """
    from rewind.runtime.airflow_client import AirflowClient

    seen: dict[str, Any] = {s: {"dq_runs": {}, "page_dq": None, "proofs": []} for s in streams}
    looks = 0
    with AirflowClient(airflow_url, username, password) as client:
        while True:
            looks += 1
            for stream in streams:
                look(client, home, stream, seen[stream])
            if time.time() >= started_at + window_s:
                break
            time.sleep(min(poll_s, max(0.0, started_at + window_s - time.time())))
        settle_until = time.monotonic() + settle_s
        while any(r["state"] not in ("success", "failed") for st in seen.values() for r in st["dq_runs"].values()) \
                and time.monotonic() < settle_until:
            time.sleep(poll_s)
            looks += 1
            for stream in streams:
                look(client, home, stream, seen[stream], before=started_at + window_s)
    for stream in streams:
        assert seen[stream]["dq_runs"], f"no run of rewind_{stream}_dq was seen: the DQ DAG did not fire"
    return {"looks": looks, "window_s": window_s, "streams": seen}


def _logs(client: Any, dag_id: str, run_id: str, instances: list[dict[str, Any]]) -> str:
    """The end of each failed task's log, so that a false alarm names its cause."""
    out = []
    for ti in instances:
        try:
            text = client.task_log(dag_id, run_id, ti["task_id"], max(1, int(ti.get("try_number") or 1)))
        except Exception as exc:  # noqa: BLE001 - the assertion matters more than its log
            text = f"(its log could not be read: {exc})"
        out.append(f"--- {ti['task_id']} (try {ti.get('try_number')}, state {ti['state']}):\n{text[-4000:]}")
    return "\n".join(out)


def _epoch(iso: str | None) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() if iso else 0.0


def look(client: Any, home: Path, stream: str, seen: dict[str, Any], before: float | None = None) -> None:
    """One look at one stream: its DQ runs and their tasks, its proof files, and the page's verdict
    (``before``: only the DQ runs queued before that time, the window's)."""
    import httpx

    dag_id = f"rewind_{stream}_dq"
    for run in client.dag_runs(dag_id):
        if before is not None and _epoch(run.get("queued_at") or run.get("run_after")) > before:
            continue
        instances = client.task_instances(dag_id, run["dag_run_id"])
        tasks = {t["task_id"]: t["state"] for t in instances}
        seen["dq_runs"][run["dag_run_id"]] = {"state": run["state"], "tasks": tasks}
        loud = {t: s for t, s in tasks.items() if s not in QUIET_TASK_STATES}
        assert run["state"] != "failed" and not loud, \
            f"{dag_id} run {run['dag_run_id']} ({run['state']}) on a fresh start: tasks {tasks}\n" + \
            _logs(client, dag_id, run["dag_run_id"], [t for t in instances if t["task_id"] in loud])
    for proof in sorted((home / "dq" / stream).glob("*/proof.json")):
        doc = json.loads(proof.read_text())
        verdict = "nothing_to_prove" if doc.get("nothing_to_prove") else "pass" if doc.get("ok") else "fail"
        if proof.parent.name not in {p["run"] for p in seen["proofs"]}:
            seen["proofs"].append({"run": proof.parent.name, "verdict": verdict})
        assert doc.get("ok"), f"the proof {proof} failed on a fresh start: {doc.get('failures')}"
    page = httpx.get(f"{client.url}/rewind/api/streams/{stream}", timeout=30,
                     headers={"Authorization": f"Bearer {client.token()}"})
    assert page.status_code == 200, page.text[:500]
    dq = page.json().get("dq")
    seen["page_dq"] = None if dq is None else ("nothing_to_prove" if dq.get("nothing_to_prove") else
                                               "PASS" if dq.get("ok") else "FAIL")
    assert seen["page_dq"] != "FAIL", f"the Rewind page shows FAIL for {stream} on a fresh start: {dq}"
    last = (page.json().get("dags") or {}).get("dq", {}).get("last_run") or {}
    assert last.get("state") != "failed", f"the page shows {dag_id}'s newest run failed: {last}"
