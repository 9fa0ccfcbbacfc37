"""Registry loading: strict validation with errors that name the file and key."""

from pathlib import Path

import pytest

from rewind.registry import RegistryError, load_registry, parse_duration

GOOD = """
streams:
  s1:
    topics: [a-topic]
    transform: rewind.demo.transform:DemoTransform
    sink: {url: "sqlite:///${REWIND_HOME}/x.db"}
    checkpoint: ${REWIND_HOME}/cp
    status_dir: ${REWIND_HOME}/status
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "streams.yaml"
    p.write_text(text)
    return p


def test_loads_and_expands_env(tmp_path: Path) -> None:
    reg = load_registry(write(tmp_path, GOOD), env={"REWIND_HOME": "/h"})
    s = reg.get("s1")
    assert s.checkpoint == "/h/cp" and s.sink.url == "sqlite:////h/x.db" and s.restart.max_attempts == 5


def test_nested_default(tmp_path: Path) -> None:
    text = GOOD.replace('"sqlite:///${REWIND_HOME}/x.db"', '"${SINK:-sqlite:///${REWIND_HOME}/y.db}"')
    assert load_registry(write(tmp_path, text), env={"REWIND_HOME": "/h"}).get("s1").sink.url == "sqlite:////h/y.db"
    assert load_registry(write(tmp_path, text), env={"REWIND_HOME": "/h", "SINK": "postgresql://x"}) \
        .get("s1").sink.url == "postgresql://x"


def test_unknown_field_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "    chekpoint_typo: 1\n")
    with pytest.raises(RegistryError) as err:
        load_registry(path, env={"REWIND_HOME": "/h"})
    assert str(path) in str(err.value) and "streams.s1.chekpoint_typo" in str(err.value)
    assert "unknown field" in str(err.value)


def test_missing_topics_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"streams\.s1\.topics"):
        load_registry(write(tmp_path, GOOD.replace("    topics: [a-topic]\n", "")), env={"REWIND_HOME": "/h"})


@pytest.mark.parametrize("key", ["topics", "transform", "sink", "checkpoint", "status_dir"])
def test_a_missing_required_key_says_what_to_give(tmp_path: Path, key: str) -> None:
    """Not pydantic's bare "Field required": the key, what it is, and an example line to copy."""
    text = "".join(line + "\n" for line in GOOD.splitlines() if not line.strip().startswith(f"{key}:"))
    with pytest.raises(RegistryError) as err:
        load_registry(write(tmp_path, text), env={"REWIND_HOME": "/h"})
    assert str(err.value).count("\n") == 0, str(err.value)  # one line
    assert f"streams.s1.{key}: required: " in str(err.value) and f"e.g. {key}: " in str(err.value), str(err.value)


def test_empty_topics_and_bad_names(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="topics"):
        load_registry(write(tmp_path, GOOD.replace("[a-topic]", "[]")), env={"REWIND_HOME": "/h"})
    with pytest.raises(RegistryError, match="invalid Kafka topic"):
        load_registry(write(tmp_path, GOOD.replace("[a-topic]", "['a topic']")), env={"REWIND_HOME": "/h"})
    with pytest.raises(RegistryError, match="stream names"):
        load_registry(write(tmp_path, GOOD.replace("  s1:", "  ../x:")), env={"REWIND_HOME": "/h"})


def test_unknown_stream_lists_known(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="known streams: s1"):
        load_registry(write(tmp_path, GOOD), env={"REWIND_HOME": "/h"}).get("nope")


def test_bad_duration_and_missing_env(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="streams.s1.window"):
        load_registry(write(tmp_path, GOOD + "    window: soon\n"), env={"REWIND_HOME": "/h"})
    with pytest.raises(RegistryError, match="NOPE is not set"):
        load_registry(write(tmp_path, GOOD.replace("${REWIND_HOME}/cp", "${NOPE}/cp")), env={"REWIND_HOME": "/h"})


def test_shipped_registry_is_valid() -> None:
    reg = load_registry(Path(__file__).resolve().parents[1] / "streams.yaml", env={"REWIND_HOME": "/h"})
    assert "demo" in reg.streams


def test_parse_duration() -> None:
    assert parse_duration("30 seconds").total_seconds() == 30
    assert parse_duration("5 min").total_seconds() == 300
    assert parse_duration("7d").days == 7
    with pytest.raises(ValueError):
        parse_duration("fortnight")


def test_supervision_thresholds(tmp_path: Path) -> None:
    text = GOOD + "    supervision: {stall_after: 5 min, max_lag: 10000}\n"
    spec = load_registry(write(tmp_path, text), env={"REWIND_HOME": "/h"}).get("s1")
    t = spec.supervision.thresholds()
    assert t["stall_s"] == 300 and t["max_lag"] == 10000 and t["heartbeat_stale_s"] == 60
    from rewind.supervision.health import Thresholds

    assert Thresholds(**t).stall_s == 300  # the trigger builds its thresholds from exactly this dict
    with pytest.raises(RegistryError, match="stall_after"):
        load_registry(write(tmp_path, GOOD + "    supervision: {stall_after: soon}\n"), env={"REWIND_HOME": "/h"})


@pytest.mark.parametrize("key,value", [
    ("restart", "{delay: 5 secnds}"), ("restart", "{max_delay: banana}"),
    ("restart", "{failure_rate_interval: '10 minutes ago'}"),
    ("savepoints", "{max_age: soon}"), ("savepoints", "{schedule: banana}"), ("supervision", "{poll: fast}")])
def test_bad_durations_and_schedules_are_refused_at_load(tmp_path: Path, key: str, value: str) -> None:
    """Every duration of the registry is checked at load, naming the file and the key (not at 3 a.m.)."""
    from tests.harness.registry_templates import demo_stream, write_registry

    path = write_registry(tmp_path / "r.yaml", demo_stream("s", "t", tmp_path, **{key: value}))
    field = value.strip("{}").split(":")[0]
    where = rf"{tmp_path / 'r.yaml'}: streams\.s\.{key}\.{field}"
    with pytest.raises(RegistryError, match=rf"{where}: .*(duration|schedule)"):
        load_registry(path)


def test_schedules_accept_presets_cron_and_durations(tmp_path: Path) -> None:
    from datetime import timedelta

    from tests.harness.registry_templates import demo_stream, write_registry

    for value, expected in [("'@daily'", "@daily"), ("'*/30 * * * *'", "*/30 * * * *"),
                            ("30 min", timedelta(minutes=30)), ("null", None)]:
        path = write_registry(tmp_path / "r.yaml", demo_stream("s", "t", tmp_path, savepoints=f"{{schedule: {value}}}"))
        assert load_registry(path).get("s").savepoints.airflow_schedule() == expected


def test_a_transform_must_implement_the_contract(tmp_path: Path) -> None:
    """A function, a missing class or an incomplete class is refused naming the stream and what is missing."""
    import sys

    from rewind.api.contract import TransformRefused, load_transform
    from tests.harness.registry_templates import demo_stream, write_registry

    (tmp_path / "my_transforms.py").write_text(
        "from rewind.api.contract import Transform\n"
        "def build(source, spec):\n    return source\n"
        "class Half(Transform):\n    def build(self, source, spec):\n        return source\n"
        "from rewind.demo.transform import DemoTransform\n"
        "from rewind.api.contract import Identity\n"
        "class ElsewhereId(DemoTransform):\n    identity = Identity('nowhere', ('event_id',))\n"
        "class LackingId(DemoTransform):\n    identity = Identity('events', ('order_id',))\n"
        "class VersionedId(DemoTransform):\n    identity = Identity('events', ('event_id',), version='offset')\n"
        "class NoDeadLetters(DemoTransform):\n    dead_letter_table = 'window_results'\n"
        "from rewind.api.contract import Aggregate\n"
        "class OtherGroup(DemoTransform):\n    aggregates = (Aggregate('window_results', keys=('merchant',)),)\n"
        "class NoTotal(DemoTransform):\n"
        "    aggregates = (Aggregate('window_results', keys=('key',), measures={'total': 'sum(amount)'}),)\n"
        "class RawAggregate(DemoTransform):\n    aggregates = (Aggregate('dead_letter', keys=('topic',)),)\n"
        "class RoutesNowhere(DemoTransform):\n    kinds = {'event': 'evnts'}\n"
        "class KindlessWindows(DemoTransform):\n    aggregates = (Aggregate('window_results', keys=('key',)),)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        for ref, message in [("my_transforms:build", "is a function, not a class implementing"),
                             ("my_transforms:Nope", "has no 'Nope'"), ("no_such_module:X", "cannot import module"),
                             ("my_transforms:Half", "must implement tables and build"),
                             ("my_transforms:ElsewhereId", "identity table 'nowhere' is not among its tables"),
                             ("my_transforms:LackingId", r"lacking \['order_id'\]"),
                             ("my_transforms:VersionedId", "a 'latest' table needs it, other tables must not"),
                             ("my_transforms:NoDeadLetters", "dead-letter table 'window_results' must be"),
                             ("my_transforms:OtherGroup", r"aggregate table 'window_results' must be keyed by its "
                                                          r"group \['window_start', 'merchant'\]"),
                             ("my_transforms:NoTotal", "aggregate table 'window_results' has no column 'total'"),
                             ("my_transforms:RawAggregate", "must have on_conflict 'replace'"),
                             ("my_transforms:RoutesNowhere", "kinds maps 'event' to 'evnts', which is not among its "
                                                             "tables"),
                             ("my_transforms:KindlessWindows", "its rows come as kind 'window' .*add kind='window'")]:
            reg = write_registry(tmp_path / "r.yaml", demo_stream("s", "t", tmp_path, transform=ref))
            with pytest.raises(TransformRefused, match=f"stream s: transform '{ref}'.*{message}"):
                load_transform(load_registry(reg).get("s"))
        good = write_registry(tmp_path / "r.yaml", demo_stream("s", "t", tmp_path))
        ok = load_transform(load_registry(good).get("s"))
        assert {t.name for t in ok.tables} == {"events", "dead_letter", "window_results"}
    finally:
        sys.path.remove(str(tmp_path))


def test_spark_conf_is_kept_as_strings_and_checked_at_load(tmp_path: Path) -> None:
    """Per-stream Spark settings: YAML numbers and booleans become Spark's strings; a key that is not a
    Spark setting, or one Rewind owns, is refused at load with the key and what to do instead."""
    conf = "    spark_conf: {spark.sql.shuffle.partitions: 8, spark.sql.adaptive.enabled: false}\n"
    spec = load_registry(write(tmp_path, GOOD + conf), env={"REWIND_HOME": "/h"}).get("s1")
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "8", "spark.sql.adaptive.enabled": "false"}
    plain = load_registry(write(tmp_path, GOOD), env={"REWIND_HOME": "/h"}).get("s1")
    assert plain.spark_conf == {} and plain.config_hash() != spec.config_hash()  # a restore warns of the change
    for bad, message in (("shuffle.partitions: 8", "is not a Spark setting"),
                         ("spark.master: 'local[4]'", "REWIND_SPARK_MASTER"),
                         ("spark.sql.streaming.stateStore.providerClass: x", "RocksDB"),
                         ("spark.sql.streaming.checkpointLocation: /x", "`checkpoint` key")):
        with pytest.raises(RegistryError, match=message) as err:
            load_registry(write(tmp_path, GOOD + f"    spark_conf: {{{bad}}}\n"), env={"REWIND_HOME": "/h"})
        assert "streams.s1.spark_conf" in str(err.value)
