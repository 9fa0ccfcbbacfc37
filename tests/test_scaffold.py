"""`rewind stream new`: the scaffold a PySpark user starts from, and the proof that holds it to its contract.

Unit: the generated files compile, pass ruff and their own test, and load as a registry entry and a
transform that meets the contract; the registry keeps its comments; a taken name, an existing
directory or a bad name is refused in one line (exit 3) with nothing written; build() (Spark) and
expect() (pandas) agree on awkward records. Slow, with the real platform: a stream scaffolded from
the CLI, changed as docs/add-your-stream.md says (a computed column), fed by its own producer, run
with --available-now, is proven by `rewind verify` (exit 0); a non-deterministic variant (the
identity gets the processing time appended in build() but not in expect()) is caught (exit 4)
with the disagreeing rows named.
"""

from __future__ import annotations

import json
import os
import py_compile
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewind.cli.main import main
from rewind.cli.scaffold import ScaffoldRefused, add_to_registry, class_name, package_files, registry_entry
from rewind.registry import StreamSpec, load_registry
from tests.harness.registry_templates import demo_stream

ROOT = Path(__file__).resolve().parents[1]
HEADER = "# my streams: one entry per stream\n# (this comment must survive)\n"


def scaffold_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["stream", "new", *args])
    out, err = capsys.readouterr()
    return code, out, err


def import_transform(directory: Path, name: str) -> Any:
    """The generated transform, loaded as the registry entry names it (PYTHONPATH=directory)."""
    from rewind.api.contract import load_transform

    sys.path.insert(0, str(directory))
    try:
        return load_transform(load_registry(directory / "streams.yaml").get(name))
    finally:
        sys.path.remove(str(directory))
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]


# --------------------------------------------------------------------------- unit


def test_generated_files_compile_and_the_entry_loads(tmp_path: Path) -> None:
    files = package_files("orders", "orders-in", 4)
    assert set(files) == {"orders/__init__.py", "orders/transform.py", "orders/producer.py", "orders/test_orders.py"}
    assert class_name("orders") == "OrdersTransform" and class_name("s3_raw_events") == "S3RawEventsTransform"
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        py_compile.compile(str(path), doraise=True)
        assert "__NAME__" not in text and "__CLASS__" not in text and "__TOPIC__" not in text
    assert "class OrdersTransform(Transform):" in files["orders/transform.py"]
    assert files["orders/transform.py"].count("# CHANGE (") == 4  # (1/3), (2/3) twice, (3/3)
    (tmp_path / "streams.yaml").write_text(add_to_registry("", "orders", "orders-in", 4, str(tmp_path)))
    spec = load_registry(tmp_path / "streams.yaml", env={"REWIND_HOME": "/srv/rewind"}).get("orders")
    assert spec.topics == ["orders-in"] and spec.partitions == 4 and spec.dq_suite == "contract"
    assert spec.transform == "orders.transform:OrdersTransform"
    assert spec.sink.url == "sqlite:////srv/rewind/sink/orders.db"
    assert spec.checkpoint == "/srv/rewind/checkpoints/orders" and spec.status_dir == "/srv/rewind/status"
    # the durations a stream reads, shown with the registry's defaults (docs/add-your-stream.md, "Durations")
    entry = registry_entry("orders", indent="")
    assert "\n  window: 10 seconds  " in entry and "\n  watermark_delay: 30 seconds  " in entry
    assert (spec.window, spec.watermark_delay) == (StreamSpec.model_fields["window"].default,
                                                   StreamSpec.model_fields["watermark_delay"].default)
    t = import_transform(tmp_path, "orders")  # load_transform checks the declarations
    assert t.identity.table == "orders_rows" and t.identity.columns == ("id",)
    assert t.dead_letter_table == "orders_dead_letter"
    assert {tb.name: tb.on_conflict for tb in t.tables} == {"orders_rows": "ignore", "orders_dead_letter": "ignore"}


def test_generated_package_passes_its_own_test_and_ruff(tmp_path: Path) -> None:
    for rel, text in package_files("orders").items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "orders"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--line-length", "120",
                           "--select", "E,F,W,I,B,UP", "orders"], cwd=tmp_path, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_cli_writes_the_package_and_appends_to_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    registry = tmp_path / "conf" / "streams.yaml"
    registry.parent.mkdir()
    registry.write_text(HEADER + "streams:\n" + demo_stream("demo", "demo-events", tmp_path / "home"))
    code, out, err = scaffold_in_process(capsys, "shop", "--dir", str(tmp_path / "code"), "--registry",
                                         str(registry), "--topic", "shop-orders", "--partitions", "4")
    assert code == 0, err
    package = tmp_path / "code" / "shop"
    for f in ("__init__.py", "transform.py", "producer.py", "test_shop.py"):
        assert f"wrote {package / f}" in out
    assert f"added stream shop to {registry}" in out
    commands = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert commands == [f"PYTHONPATH={tmp_path / 'code'} python -m shop.producer --count 2000",
                        f"PYTHONPATH={tmp_path / 'code'} rewind stream run shop --available-now --registry "
                        f"{registry}",
                        f"PYTHONPATH={tmp_path / 'code'} rewind verify shop --registry {registry}"]
    text = registry.read_text()
    assert text.startswith(HEADER) and "# written by `rewind stream new shop`" in text
    reg = load_registry(registry, env={"REWIND_HOME": str(tmp_path / "home")})
    assert list(reg.streams) == ["demo", "shop"] and reg.get("shop").topics == ["shop-orders"]
    assert 'TOPIC = "shop-orders"' in (package / "producer.py").read_text()
    assert "PARTITIONS = 4" in (package / "producer.py").read_text()


def test_refusals_say_one_line_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    registry = tmp_path / "streams.yaml"
    registry.write_text(HEADER + "streams:\n" + demo_stream("demo", "demo-events", tmp_path / "home"))
    monkeypatch.setenv("REWIND_REGISTRY", str(registry))  # the default registry of `stream new`
    before = registry.read_text()
    (tmp_path / "shop").mkdir()

    def refused(*args: str) -> str:
        code, out, err = scaffold_in_process(capsys, *args)
        assert code == 3, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("refused: "), err
        assert registry.read_text() == before
        return err

    assert str(tmp_path / "shop") in refused("shop", "--dir", str(tmp_path))  # the directory exists
    assert "'demo' is already in" in refused("demo", "--dir", str(tmp_path))  # the name is taken
    assert not (tmp_path / "demo").exists()
    for bad in ("Shop", "1shop", "my-shop", "shop.v2", "class", "json", "pyspark", "x" * 42):
        assert "stream name" in refused(bad, "--dir", str(tmp_path))
        assert not (tmp_path / bad).exists()
    assert "topic" in refused("other", "--dir", str(tmp_path), "--topic", "no/slash")
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("registry, indent", [
    ("", "  "),
    ("# only a comment\n", "  "),
    ("streams: {}  # none yet\n", "  "),
    ("streams:\n", "  "),
    ("streams: null\n", "  "),
    ("# head\nstreams:\n    old:\n        topics: [t]\n# tail comment", "    "),
])
def test_add_to_registry_keeps_the_text_and_matches_its_indent(registry: str, indent: str) -> None:
    out = add_to_registry(registry, "shop", directory="/code")
    for comment in [line for line in registry.splitlines() if line.lstrip().startswith("#")]:
        assert comment in out
    assert f"\n{indent}shop:\n" in out and f"\n{indent}  topics: [shop]\n" in out
    assert out.startswith(registry.split("streams")[0])
    import yaml

    assert list(yaml.safe_load(out)["streams"])[-1] == "shop"
    assert registry_entry("shop", directory="/code", indent=indent) in out


@pytest.mark.parametrize("registry, message", [
    ("streams:\n  shop: {}\n", "'shop' is already in"),
    ("streams: {shop2: {topics: [x]}}\n", "flow style"),
    ("streams: [\n", "not valid YAML"),
    ("other: 1\n", "expected only a top-level mapping"),
    ("- a\n", "expected only a top-level mapping"),
])
def test_add_to_registry_refusals(registry: str, message: str) -> None:
    with pytest.raises(ScaffoldRefused, match=message):
        add_to_registry(registry, "shop", where="streams.yaml")


#: Records on which Spark's from_json and Python's json module could differ: build() and expect()
#: of the scaffold must still agree on every one (the proof holds the sink to expect()).
AWKWARD = [
    b'{"id":"a","value":1.5,"ts":"2026-01-01T00:00:00Z"}', b'{"id":"b","value":1,"ts":"2026-01-01T00:00:00.5+02:00"}',
    b'{"id":123,"value":1,"ts":"2026-01-01T00:00:00Z"}', b'{"id":1e20,"value":2,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":{"a": 1},"value":2,"ts":"2026-01-01T00:00:00Z"}', b'{"id":true,"value":1,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"a\\ud800b","value":1,"ts":"2026-01-01T00:00:00Z"}', b'{"id":"a\xff\xe2\x82b","value":1,'
    b'"ts":"2026-01-01T00:00:00Z"}', b'{"id":"\\u00e9\xc3\xa9\\ud83d\\ude00","value":1,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"a","value":NaN,"ts":"2026-01-01T00:00:00Z"}', b'{"id":"a","value":"2","ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"a","value":"NaN","ts":"2026-01-01T00:00:00Z"}', b'{"id":"a","value":true,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"c","value":1' + b"0" * 400 + b',"ts":"2026-01-01T00:00:00Z"}', b'{"id":"a","value":-1e400,'
    b'"ts":"2026-01-01T00:00:00Z"}', b'{"id":"i","value":-1.7976931348623157e308,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"a","value":1,"ts":"2026-02-30T00:00:00Z"}', b'{"id":"a","value":1,"ts":"2026-01-01T24:00:00Z"}',
    b'{"id":"a","value":1,"ts":"0000-01-01T00:00:00Z"}', b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00+23:59"}',
    b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00Z\\n"}', b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00Z\\r"}',
    b'{"id":"a","value":1,"ts":"2026-01-01 00:00:00Z"}', b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00"}',
    b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00.1234567Z"}', b'{"id":"a","value":1,"ts":2026}',
    b'{"id":null,"value":1}', b"[1,2]", b"null", b"", None, b"\xff\xfe", b"not json", b"{'id':'a','value':1}",
    b'{"id":"a","id":"d","value":1,"ts":"2026-01-01T00:00:00Z"}', b'{"ID":"a","value":1,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"e","value":1,"ts":"2026-01-01T00:00:00Z"} trailing', b'{"id":"f","value":1,"ts":"2026-01-01T00:00:00Z"}}',
    b' \n{"id":"g","value":12345678901234567890,"ts":"2026-01-01T00:00:00Z"}',
    b'\x0b{"id":"a","value":1,"ts":"2026-01-01T00:00:00Z"}',
    b'\xef\xbb\xbf{"id":"a","value":1,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":"a","value":01,"ts":"2026-01-01T00:00:00Z"}', b'{"id":"a","value":1,"ts":"2026-01-01T00:00:00Z","x":"\\q"}',
    b'{"id":"h","value":1,"ts":"2026-01-01T00:00:00Z","x":"\\ud800"}',
]


def test_build_and_expect_agree_on_awkward_records(tmp_path: Path, spark: Any) -> None:
    for rel, text in package_files("awkward").items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "streams.yaml").write_text(add_to_registry("", "awkward", directory=str(tmp_path)))
    t = import_transform(tmp_path, "awkward")
    stamp = pd.Timestamp("2026-01-01", tz="UTC").to_pydatetime()
    source = spark.createDataFrame([("t", 0, i, stamp, None, v) for i, v in enumerate(AWKWARD)],
                                   "topic string, partition int, offset bigint, timestamp timestamp, key binary, "
                                   "value binary")
    got = t.build(source, None).toArrow().to_pandas().sort_values("offset").reset_index(drop=True)
    exp = t.expect(pd.DataFrame({"topic": "t", "partition": 0, "offset": range(len(AWKWARD)), "timestamp": 0,
                                 "key": None, "value": AWKWARD}), None)

    def verdict(row: Any, valid: bool) -> tuple[Any, ...]:
        if not valid:
            return ("malformed",)
        return (row["id"], float(row["value"]), pd.Timestamp(row["event_time"]).tz_convert("UTC"))

    assert ((got["kind"] == "dead") == (got["reason"] == "malformed")).all(), got[["kind", "reason"]]
    spark_says = [verdict(r, r["kind"] == "row") for _, r in got.iterrows()]
    pandas_says = [verdict(r, r["reason"] is None) for _, r in exp.iterrows()]
    disagree = [(v, s, p) for v, s, p in zip(AWKWARD, spark_says, pandas_says) if s != p]
    assert not disagree, disagree
    assert sum(s != ("malformed",) for s in spark_says) == 10  # some valid ones: the test can fail


# --------------------------------------------------------------------------- slow: the real platform


def cli_env(platform: Any, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **platform.env(), "REWIND_HOME": str(tmp_path / "home"),
            "REWIND_REGISTRY": str(tmp_path / "streams.yaml"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
            "PYSPARK_PYTHON": sys.executable, "REWIND_LAG_PROBE_S": "0"}


def rewind(env: dict[str, str], cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rewind.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def change(path: Path, old: str, new: str) -> None:
    """One edit of a generated file, as the docs page describes it (the text must be there once)."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not once in {path}"
    path.write_text(text.replace(old, new))


def scaffold_and_run(tmp_path: Path, platform: Any, new_topic: Callable[..., str], name: str, partitions: int,
                     count: int, edit: Callable[[Path], None]) -> tuple[dict[str, str], dict[str, Any]]:
    """`rewind stream new` from the CLI, the edit, the generated producer, then `stream run --available-now`."""
    topic = new_topic(partitions)
    env = cli_env(platform, tmp_path)
    (tmp_path / "streams.yaml").write_text(HEADER + "streams:\n" + demo_stream("demo", "demo-events",
                                                                                tmp_path / "home"))
    new = rewind(env, tmp_path, "stream", "new", name, "--dir", str(tmp_path), "--topic", topic, "--partitions",
                 str(partitions))
    assert new.returncode == 0, new.stderr
    edit(tmp_path / name / "transform.py")
    produced = subprocess.run([sys.executable, "-m", f"{name}.producer", "--count", str(count), "--malformed-every",
                               "97"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert produced.returncode == 0, produced.stderr
    sent = json.loads(produced.stdout)
    assert sent["sent"] == count and sent["malformed"] == count // 97
    run = rewind(env, tmp_path, "stream", "run", name, "--available-now", timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return env, sent


@pytest.mark.slow
def test_scaffolded_stream_with_a_computed_column_is_proven(tmp_path: Path, platform: Any,
                                                           new_topic: Callable[..., str]) -> None:
    def add_computed_column(path: Path) -> None:  # docs/add-your-stream.md, "Change it"
        change(path, 'Column("value", "double"), ', 'Column("value", "double"), Column("doubled", "double"), ')
        change(path, '        # rows = rows.withColumn("doubled", F.col("value") * 2)',
               '        rows = rows.withColumn("doubled", F.col("value") * 2)')
        change(path, '        # out["doubled"] = out["value"] * 2', '        out["doubled"] = out["value"] * 2')

    env, sent = scaffold_and_run(tmp_path, platform, new_topic, "shop", 4, 2000, add_computed_column)
    verify = rewind(env, tmp_path, "verify", "shop", "--json", timeout=300)
    assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-4000:]
    summary = json.loads(verify.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["records_in_range"] == 2000, summary
    assert summary["expected_dead_letters"] == sent["malformed"] == 20, summary
    with sqlite3.connect(tmp_path / "home" / "sink" / "shop.db") as db:
        rows = db.execute("select count(*), sum(doubled = 2 * value) from shop_rows").fetchone()
        dead = db.execute("select count(*), min(reason), max(reason) from shop_dead_letter").fetchone()
    assert rows == (1980, 1980) and dead == (20, "malformed", "malformed")


@pytest.mark.slow
def test_a_non_deterministic_transform_is_caught(tmp_path: Path, platform: Any,
                                                 new_topic: Callable[..., str]) -> None:
    def stamp_the_id_with_the_clock(path: Path) -> None:  # build() only: expect() cannot know the clock
        change(path, "            record_id.alias(\"id\"),",
               "            F.concat(record_id, F.lit(\"@\"), F.current_timestamp().cast(\"string\")).alias(\"id\"),")

    env, sent = scaffold_and_run(tmp_path, platform, new_topic, "clocked", 2, 300, stamp_the_id_with_the_clock)
    verify = rewind(env, tmp_path, "verify", "clocked", "--json", timeout=300)
    assert verify.returncode == 4, verify.stdout[-4000:] + verify.stderr[-4000:]
    summary = json.loads(verify.stdout.strip().splitlines()[-1])
    valid = 300 - sent["malformed"]
    assert summary["ok"] is False
    assert summary["rows_unexpected"]["count"] == valid, summary
    assert summary["records_missing"]["count"] == valid, summary
    example = summary["rows_unexpected"]["examples"][0]
    assert example["table"] == "clocked_rows" and "@" in example["identity"], example
    assert summary["records_missing"]["examples"][0]["id"].startswith("clocked-"), summary
