"""Executor staging for the SQL sinks (``rewind.sink.staging``), on SQLite and PostgreSQL, without Spark:
tasks stage chunks (in other processes), the driver commits; the conflict rules across tasks, a
re-run batch, a crash between staging and commit, a task retried, a zombie driver.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pandas as pd
import pytest
from harness.sink_data import STATE, TABLES, dead_letters, events, windows

from rewind.api.tables import LEDGER_TABLE
from rewind.sink.errors import SinkRefused, SinkWriteError
from rewind.sink.sql import ExactlyOnceSqlSink
from rewind.sink.staging import SqlStaging, _copy_text


def staging(url: str, tables: tuple[Any, ...] = (*TABLES, STATE)) -> SqlStaging:
    return SqlStaging(ExactlyOnceSqlSink(url, "orders", tables))


def _task(url: str, part: int, attempt: str, rows: dict[str, Any]) -> dict[str, tuple[int, int]]:
    st = staging(url)
    try:
        return {name: st.stage(name, r, attempt, part << 40) for name, r in rows.items()}
    finally:
        st.sink.dispose()


def run_tasks(url: str, attempt: str, parts: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """Each part staged by its own process, as Spark's Python workers do; the summed counts."""
    with mp.get_context("spawn").Pool(2) as pool:
        answers = pool.starmap(_task, [(url, i, attempt, rows) for i, rows in enumerate(parts)])
    counts: dict[str, int] = {}
    staged: dict[str, int] = {}
    for a in answers:
        for name, (handed, kept) in a.items():
            counts[name] = counts.get(name, 0) + handed
            staged[name] = staged.get(name, 0) + kept
    return counts, staged


def test_tasks_stage_the_driver_commits_with_each_tables_rule(db_url: str) -> None:
    st = staging(db_url)
    st.create()
    st.sink.write_batch(0, {"events": events(0, 3, value=b"old"), "window_results": windows(["a"], 1),
                            "stock": [{"sku": "s1", "qty": 1, "version": 50}]})
    parts = [
        {"events": events(2, 4, value=b"task0"), "window_results": windows(["a", "b"], 2),
         "stock": [{"sku": "s1", "qty": 7, "version": 10}, {"sku": "s2", "qty": 1, "version": 3}]},
        {"events": events(4, 4, value=b"task1"), "dead_letter": dead_letters(100, 2),
         "window_results": windows(["b", "c"], 3), "stock": [{"sku": "s2", "qty": 9, "version": 8}]},
    ]
    counts, staged = run_tasks(db_url, "1-a", parts)
    result = st.commit(1, "1-a", counts, staged, '{"orders":{"0":8}}')
    assert not result.skipped and result.rows == counts
    ev = st.sink.read_table("events").set_index("offset")["value"].to_dict()
    # first wins: the committed batch's rows, then task 0 (earlier in the batch) over task 1
    assert ev == {0: b"old", 1: b"old", 2: b"old", 3: b"task0", 4: b"task0", 5: b"task0", 6: b"task1", 7: b"task1"}
    win = st.sink.read_table("window_results")
    assert dict(zip(win["user"], win["count"])) == {"a": 2, "b": 3, "c": 3}  # last wins: task 1's b
    stock = st.sink.read_table("stock").set_index("sku")
    assert stock.loc["s1", "qty"] == 1 and stock.loc["s2", "qty"] == 9  # the highest version wins
    assert len(st.sink.read_table("dead_letter")) == 2
    for stage in st._stages.values():
        with st.sink.engine.connect() as conn:
            assert conn.execute(stage.select()).first() is None, f"{stage.name} emptied by the commit"

    # Spark re-runs batch 1 after a crash: staged again under a new attempt, skipped, staging emptied.
    counts, staged = run_tasks(db_url, "1-b", [{"events": events(0, 50, value=b"again")}])
    assert st.commit(1, "1-b", counts, staged, '{"orders":{"0":8}}').skipped
    assert len(st.sink.read_table("events")) == 8 and st.sink.committed_batch_ids() == [0, 1]
    st.sink.dispose()


def test_a_crash_between_stage_and_commit_leaves_nothing_and_a_retried_task_counts_once(db_url: str) -> None:
    st = staging(db_url)
    st.create()
    run_tasks(db_url, "5-dead", [{"events": events(0, 100)}])  # the driver died before committing
    assert st.sink.read_table("events").empty and st.sink.committed_batch_ids() == []
    assert st.clear() == 100  # the next writer starts by deleting orphans
    # a task that failed half-way and was retried stages some rows twice
    counts, staged = run_tasks(db_url, "5-b", [{"events": events(0, 60)}, {"events": events(60, 40)}])
    st.stage("events", events(0, 30), "5-b", 0)
    result = st.commit(5, "5-b", counts, staged)
    assert result.rows == {"events": 100}
    assert sorted(st.sink.read_table("events")["offset"]) == list(range(100))
    st.sink.dispose()


def test_a_zombie_whose_staging_was_cleared_commits_nothing(db_url: str) -> None:
    zombie, successor = staging(db_url), staging(db_url)
    zombie.create()
    counts, staged = run_tasks(db_url, "2-z", [{"events": events(0, 10)}])
    successor.clear()
    with pytest.raises(SinkWriteError, match="zombie"):
        zombie.commit(2, "2-z", counts, staged)
    assert zombie.sink.committed_batch_ids() == [] and zombie.sink.read_table(LEDGER_TABLE).empty
    zombie.sink.dispose()
    successor.sink.dispose()


def test_bad_rows_are_refused_by_the_task_before_anything_is_staged(db_url: str) -> None:
    st = staging(db_url)
    st.create()
    with pytest.raises(SinkRefused, match="key column"):
        st.stage("events", [{"topic": "orders", "partition": 0}], "1-x", 0)
    with pytest.raises(SinkRefused, match="unknown table"):
        st.stage("nope", [], "1-x", 0)
    assert st.clear() == 0
    st.sink.dispose()


def test_copy_text_escapes_what_copy_reads_specially() -> None:
    import datetime as dt

    assert _copy_text("string", "a\tb\nc\\d") == "a\\tb\\nc\\\\d"
    assert _copy_text("string", None) == "\\N" and _copy_text("binary", b"\x00\xff") == "\\\\x00ff"
    assert _copy_text("double", float("-inf")) == "-Infinity" and _copy_text("double", float("nan")) == "NaN"
    assert _copy_text("timestamp", dt.datetime(2024, 5, 1, tzinfo=dt.UTC)) == "2024-05-01T00:00:00+00:00"


def test_values_survive_the_copy_path_unchanged(db_url: str) -> None:
    """Text with tabs, newlines and backslashes, bytes, nulls and time zones staged and moved: the
    same rows as the driver path's write_batch."""
    st, direct = staging(db_url), ExactlyOnceSqlSink(db_url, "direct", TABLES, table_prefix="d_")
    st.create()
    rows = events(0, 6)
    rows[1]["value"] = b"\x00\t\n\\"
    rows[2]["value"] = None
    rows[3]["amount"] = None
    rows[4]["topic"] = "or\tders\n\\x"
    counts, staged = run_tasks(db_url, "0-a", [{"events": rows}])
    st.commit(0, "0-a", counts, staged)
    direct.write_batch(0, {"events": rows})
    pd.testing.assert_frame_equal(st.sink.read_table("events"), direct.read_table("events"))
    st.sink.dispose()
    direct.dispose()


# --------------------------------------------------------------------------- in Spark
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_demo_stream_writes_from_the_executors(spark: Any, platform: Any, tmp_path: Any, backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    """The demo stream (malformed, late and duplicate records on 4 partitions, keyless) with
    ``write_from: executors``: verify proves every Kafka record once, as with the driver path."""
    import uuid

    from rewind.demo.producer import ProduceSpec, produce
    from rewind.driver.runner import build_query, open_sink
    from rewind.proof.verify import verify_stream
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/sink.db"
    else:
        from tests.harness.pg_databases import create_database, drop_database

        server, name = request.getfixturevalue("postgres_url"), f"t_{uuid.uuid4().hex[:12]}"
        url = create_database(server, name)
        request.addfinalizer(lambda: drop_database(server, name))
    topic = f"stg-{uuid.uuid4().hex[:8]}"
    sent = produce(platform.kafka_bootstrap, ProduceSpec(topic=topic, count=6000, rate=3000, partitions=4,
                                                         id_prefix="stg", malformed_every=41, late_every=67,
                                                         duplicate_every=29, keyless=True))
    entry = demo_stream("stg", topic, tmp_path, max_offsets=1500, window="1 second", watermark_delay="1 second",
                        allowed_lateness="500 ms", sink=f'{{url: "{url}", table_prefix: stg_, write_from: executors}}')
    spec = load_registry(write_registry(tmp_path / "s.yaml", entry)).get("stg")
    phases: list[dict[str, Any]] = []
    query = build_query(spark, spec, platform.kafka_bootstrap, available_now=True, phases=phases)
    assert query.awaitTermination(300), "the available_now run did not finish"
    assert query.exception() is None
    report = verify_stream(spec, platform.kafka_bootstrap)
    assert report.ok, report
    assert report.kafka_records == sent.sent and report.expected_dead_letters > 0 and report.windows_checked > 0
    assert phases and all("stage_s" in p for p in phases), "the staged writer ran"
    with open_sink(spec) as sink:
        assert len(sink.committed_batch_ids()) == len(phases) >= 4
        staging_rows = SqlStaging(sink).clear()
    assert staging_rows == 0, "every committed attempt emptied its staging rows"
