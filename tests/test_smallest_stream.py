"""A stream written from docs/add-your-stream.md alone, with the least the docs allow, fed by Kafka's own Java client.

The transform has the two required members (``tables`` and a ``build`` returning a dict): stateless, no
``event_time``, no ``expect()``, no ``dq_suite`` and no source options in its registry entry. Its records come
from a transactional Java producer (aborted transactions, null keys, one record in 97 not JSON, amounts at the
edge of ``decimal(18,2)``). Found on 2026-11-30 by writing such a stream: its first batch died in the batch
writer's late-record filter (``event_time`` cannot be resolved), ``rewind verify`` died on the demo's tables
(the registry's default suite), and Spark's default ``startingOffsets: latest`` skipped every record already sent.
"""

from __future__ import annotations

import decimal
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.tiny_transform import TRANSFORM

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def java_produce(bootstrap: str, topic: str, transactions: int) -> tuple[int, int]:
    out = subprocess.run(["java", "-cp", str(ROOT / ".jars" / "kafka" / "*"),
                          str(ROOT / "tests" / "harness" / "java" / "TransactionalProducer.java"), bootstrap, topic,
                          str(transactions)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    _, committed, _, aborted = out.stdout.split()[-4:]
    return int(committed), int(aborted)


def test_the_smallest_stream_the_docs_allow_runs_and_is_proven_and_a_cent_off_fails(
        tmp_path: Path, platform: Any, new_topic: Callable[..., str], spark: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic = new_topic(3, "tiny")
    committed, aborted = java_produce(platform.kafka_bootstrap, topic, 30)
    assert (committed, aborted) == (260, 40)
    (tmp_path / "minis").mkdir()
    (tmp_path / "minis" / "__init__.py").write_text("")
    (tmp_path / "minis" / "t.py").write_text(TRANSFORM)
    home = tmp_path / "home"
    registry = tmp_path / "streams.yaml"
    registry.write_text(f"streams:\n  tiny:\n    topics: [{topic}]\n    transform: minis.t:Tiny\n"
                        f"    sink: {{url: \"sqlite:///{home}/tiny.db\"}}\n    checkpoint: {home}/checkpoints/tiny\n"
                        f"    status_dir: {home}/status\n")
    env = {**os.environ, **platform.env(), "REWIND_HOME": str(home), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}

    def rewind(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rewind.cli", *args, "--registry", str(registry)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)

    run = rewind("stream", "run", "tiny", "--bootstrap", platform.kafka_bootstrap, "--available-now")
    assert run.returncode == 0, run.stderr[-4000:]
    verify = rewind("verify", "tiny", "--bootstrap", platform.kafka_bootstrap, "--json")
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    summary = json.loads(verify.stdout.strip().splitlines()[-1])
    malformed = sum(1 for t in range(30) if t % 7 != 3 for n in range(t * 10, t * 10 + 10) if n % 97 == 0)
    assert summary["ok"] and summary["records_in_range"] == committed, summary
    with sqlite3.connect(home / "tiny.db") as db:
        rows = db.execute("select id, amount from rows").fetchall()
        dead = db.execute("select count(*) from dead_letter").fetchone()[0]
    assert len(rows) == committed - malformed and dead == malformed
    big = [r for r in rows if decimal.Decimal(str(r[1])) == decimal.Decimal("9999999999999999.99")]
    assert big and all(r[0].startswith("j-") for r in rows)

    with sqlite3.connect(home / "tiny.db") as db:  # one cent off, on the largest value
        db.execute("update rows set amount = '9999999999999999.98' where id = ?", (big[0][0],))
    damaged = rewind("verify", "tiny", "--bootstrap", platform.kafka_bootstrap, "--json")
    assert damaged.returncode == 4, damaged.stdout[-3000:] + damaged.stderr[-3000:]
    assert big[0][0] in damaged.stdout and "9999999999999999.98" in damaged.stdout, damaged.stdout[-3000:]

    # The same topic read by a second stream the docs let start mid-topic (explicit offsets): its proof starts
    # where it did (its checkpoint's initial offsets, kept as its origin), not at the records it never read,
    # and still fails on a row lost above that start. (Before, every record below its start was "missing".)
    start = {topic: {str(p): 30 for p in range(3)}}
    with registry.open("a") as entry:
        entry.write(f"  mid:\n    topics: [{topic}]\n    transform: minis.t:Tiny\n"
                    f"    sink: {{url: \"sqlite:///{home}/mid.db\"}}\n    checkpoint: {home}/checkpoints/mid\n"
                    f"    status_dir: {home}/status\n    source:\n"
                    f"      options: {{startingOffsets: '{json.dumps(start)}'}}\n")
    run = rewind("stream", "run", "mid", "--bootstrap", platform.kafka_bootstrap, "--available-now")
    assert run.returncode == 0, run.stderr[-4000:]
    from rewind.proof.verify import read_records

    above = read_records(platform.kafka_bootstrap, [topic], lower={(topic, p): 30 for p in range(3)})
    assert 0 < len(above) < committed
    # rewind verify's own code in this process (the CLI around it is proven above), on the worker's session
    from rewind.proof.contract_proof import verify_contract_stream
    from rewind.registry import load_registry

    monkeypatch.syspath_prepend(str(tmp_path))  # the stream's module, as the CLI's PYTHONPATH has it
    monkeypatch.setenv("REWIND_HOME", str(home))
    mid = load_registry(registry).get("mid")
    summary = verify_contract_stream(mid, platform.kafka_bootstrap).summary()
    assert summary["ok"] and summary["records_in_range"] == len(above), (summary, len(above))
    assert any(f"from the stream's start (its entry gives one; per partition: {topic}[0] 30," in note
               for note in summary["notes"]), summary["notes"]
    with sqlite3.connect(home / "mid.db") as db:
        assert db.execute("select min(offset) from rows").fetchone()[0] >= 30
        lost = db.execute("select id from rows order by offset desc limit 1").fetchone()[0]
        db.execute("delete from rows where id = ?", (lost,))
    damaged = verify_contract_stream(mid, platform.kafka_bootstrap).summary()
    assert not damaged["ok"] and lost in json.dumps(damaged["records_missing"], default=str), damaged
