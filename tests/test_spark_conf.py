"""Spark settings: the registry's ``spark_conf`` over ``--conf`` and ``spark-defaults.conf`` over Rewind's defaults.

Pure tests of the precedence, plus one session started the way ``rewind stream run`` starts one (plain
Python: pyspark launches the JVM, which reads ``$SPARK_CONF_DIR/spark-defaults.conf``). Under spark-submit
(Airflow's launch) the same file reaches a new stream's checkpoint: test_operations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rewind.driver.spark_conf import (
    DEFAULTS,
    REQUIRED,
    driver_defaults,
    effective,
    file_preset,
    master_defaults,
    parse_properties,
    spark_defaults_file,
    submit_args_conf,
)

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_fill_only_what_the_deployment_and_the_registry_leave_unset() -> None:
    preset = {"spark.sql.shuffle.partitions": "64", "spark.ui.enabled": "true"}
    registry = {"spark.driver.memory": "4g"}
    out = effective(preset, registry, DEFAULTS)
    assert "spark.sql.shuffle.partitions" not in out and "spark.ui.enabled" not in out  # the deployment's stand
    assert out["spark.driver.memory"] == "4g"  # the registry's, not Rewind's 1g
    assert out["spark.default.parallelism"] == "2"  # nobody set it: Rewind's default
    assert out["spark.sql.streaming.metricsEnabled"] == "true"
    for key, value in REQUIRED.items():  # what the checkpoint tools and proofs rely on, whatever is preset
        assert effective({key: "other"}, {}, DEFAULTS)[key] == value


def test_spark_defaults_conf_is_read_as_spark_submit_reads_it(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# a comment\n! another\nspark.sql.shuffle.partitions   7\nspark.driver.memory=1500m\n"
        "spark.master: spark://h:7077\nspark.eventLog.dir  hdfs://nn:8020/logs\n\n")
    env = {"SPARK_CONF_DIR": str(tmp_path),
           "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.port=4999 --conf=spark.driver.memory=2g pyspark-shell"}
    assert spark_defaults_file(env) == tmp_path / "spark-defaults.conf"
    assert parse_properties((tmp_path / "spark-defaults.conf").read_text()) == {
        "spark.sql.shuffle.partitions": "7", "spark.driver.memory": "1500m", "spark.master": "spark://h:7077",
        "spark.eventLog.dir": "hdfs://nn:8020/logs"}
    assert submit_args_conf(env["PYSPARK_SUBMIT_ARGS"]) == {"spark.ui.port": "4999", "spark.driver.memory": "2g"}
    preset = file_preset(env)
    assert preset["spark.driver.memory"] == "2g" and preset["spark.sql.shuffle.partitions"] == "7"
    assert spark_defaults_file({"SPARK_CONF_DIR": str(tmp_path / "none")}) is None


def test_a_stream_driver_gets_its_ui_and_an_event_log_only_when_asked() -> None:
    d = driver_defaults("/data/checkpoints/demo/", 40411)
    assert d["spark.ui.enabled"] == "true" and d["spark.ui.port"] == "40411"
    assert not any(k.startswith("spark.eventLog") for k in d)  # off by default, as in Spark
    for on in ("true", " TRUE", True):
        d = driver_defaults("/data/checkpoints/demo/", 40411, {"spark.eventLog.enabled": on})
        assert d["spark.eventLog.dir"] == "/data/checkpoints/demo.eventlog"  # beside the checkpoint, rolled
        assert d["spark.eventLog.rolling.enabled"] == "true"
    assert "spark.eventLog.dir" not in driver_defaults("/cp/demo", 1, {"spark.eventLog.enabled": "false"})
    # no directory to create on an object store: the user's own spark.eventLog.dir is needed there
    assert "spark.eventLog.dir" not in driver_defaults("s3a://bucket/cp/demo", 1, {"spark.eventLog.enabled": "true"})


def test_spark_defaults_conf_wins_over_rewinds_defaults_in_a_real_session(tmp_path: Path) -> None:
    """``rewind stream run``'s way: plain Python starts the JVM; the file's settings stand, Rewind fills the rest."""
    (tmp_path / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 5\nspark.driver.memory 768m\n")
    probe = ("import json\nfrom rewind.driver.spark_session import build_session\n"
             "s = build_session('conf-probe', conf={'spark.default.parallelism': '3'})\n"
             "c = s.sparkContext.getConf()\n"
             "got = {k: c.get(k) for k in ('spark.sql.shuffle.partitions', 'spark.driver.memory',"
             " 'spark.default.parallelism', 'spark.sql.streaming.metricsEnabled', 'spark.ui.enabled')}\n"
             "def worker(batches):\n"
             "    import os, sys, psutil, pyarrow as pa\n"
             "    daemon = ' '.join(psutil.Process(os.getppid()).cmdline())\n"
             "    for _ in batches:\n"
             "        yield pa.RecordBatch.from_pylist([{'daemon': daemon, 'api': 'rewind.api' in sys.modules,"
             " 'pandas': 'pandas' in sys.modules}])\n"
             "got['workers'] = sorted({tuple(r) for r in s.range(4, numPartitions=2).mapInArrow("
             "worker, 'daemon string, api boolean, pandas boolean').collect()})\n"
             "print(json.dumps(got))\n"
             "s.stop()\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # local[2]: the workers are forked from Rewind's daemon, with the contract imported before their first task,
    # and no pandas: an Arrow function's workers never need it (rewind.api imports it only where it is used)
    workers = got.pop("workers")
    assert workers and all("rewind.driver.python_daemon" in d and api and not pandas
                           for d, api, pandas in workers), workers
    assert got == {"spark.sql.shuffle.partitions": "5", "spark.driver.memory": "768m",
                   "spark.default.parallelism": "3", "spark.sql.streaming.metricsEnabled": "true",
                   "spark.ui.enabled": "false"}, got


def test_the_preloading_python_daemon_is_a_default_of_local_masters_only() -> None:
    """Only a local master's executors surely run this interpreter, where Rewind is installed; a cluster's keep
    Spark's daemon unless the deployment names Rewind's (then ``effective`` keeps the deployment's)."""
    from rewind.driver.python_daemon import PRELOAD, modules_to_preload, preload

    key = "spark.python.daemon.module"
    assert master_defaults("local[2]") == {key: "rewind.driver.python_daemon"} == master_defaults("local")
    assert master_defaults("yarn") == {} == master_defaults("spark://h:7077") == master_defaults("")
    assert key not in effective({key: "pyspark.daemon"}, {}, {**DEFAULTS, **master_defaults("local[*]")})
    assert preload(("json", "no_such_module_here")) == ["no_such_module_here"]  # skipped: the worker reports it
    # the driver names its transform's module (spark.executorEnv.REWIND_PRELOAD): imported once, after the rest
    assert modules_to_preload({}) == PRELOAD
    assert modules_to_preload({"REWIND_PRELOAD": " my.transform ,pyarrow,, other"}) == (*PRELOAD, "my.transform",
                                                                                       "other")


def test_a_stream_driver_names_its_transform_module_for_the_daemon_to_import(tmp_path: Path) -> None:
    """The transform's module, not pandas, is what a stream's workers unpickle their functions from."""
    from rewind.driver.runner import driver_defaults_for
    from rewind.registry import load_registry
    from tests.harness.registry_templates import demo_stream, write_registry

    reg = write_registry(tmp_path / "streams.yaml", demo_stream("pre", "t", tmp_path))
    defaults = driver_defaults_for(load_registry(reg).get("pre"))
    assert defaults["spark.executorEnv.REWIND_PRELOAD"] == "rewind.demo.transform"
