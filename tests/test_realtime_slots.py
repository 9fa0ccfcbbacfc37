"""A real-time stream whose source has more partitions than the application has task slots is refused.

Spark's real-time mode runs one task per Kafka partition for a whole epoch; a partition whose task gets no slot
is never read and nothing fails (a 3-partition topic on ``local[2]``: the third partition unread for 90 s). Pure
checks of the slot count per kind of master, then ``check_slots`` on the worker's real session against real
topics of 2 and 3 partitions.
"""

from __future__ import annotations

from typing import Any

import pytest

from rewind.driver.realtime import RealTimeRefused, check_slots
from rewind.driver.realtime_slots import slots_refusal, task_slots
from rewind.registry import StreamSpec


@pytest.mark.parametrize(("master", "conf", "slots"), [
    ("local", {}, 1),
    ("local[2]", {}, 2),
    ("local[ 3 ]", {}, 3),
    ("local[*]", {}, 8),
    ("local[4, 2]", {}, 4),               # with task retries: still 4 cores
    ("local[*,3]", {}, 8),
    ("LOCAL[4]", {"spark.task.cpus": "2"}, 2),
    ("local-cluster[2, 3, 1024]", {}, 6),
    ("yarn", {}, 2),                      # Spark's defaults on YARN: 2 executors of 1 core
    ("yarn", {"spark.executor.instances": "3", "spark.executor.cores": "2"}, 6),
    ("yarn", {"spark.executor.instances": "3", "spark.executor.cores": "4", "spark.task.cpus": "2"}, 6),
    ("yarn", {"spark.dynamicAllocation.enabled": "true"}, None),   # no maximum: unknown
    ("yarn", {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.maxExecutors": "5"}, 5),
    ("k8s://https://api:6443", {"spark.executor.instances": "4"}, 4),
    ("spark://m:7077", {}, None),
    ("spark://m:7077", {"spark.cores.max": "6"}, 6),
    ("mesos://m:5050", {}, None),
    ("yarn", {"spark.executor.instances": "many"}, 2),           # unparsable: Spark's default, as Spark would refuse it
])
def test_task_slots_per_master(master: str, conf: dict[str, str], slots: int | None) -> None:
    assert task_slots(master, conf, cpu_count=8) == slots


def test_the_refusal_names_the_counts_and_the_setting_to_give() -> None:
    assert slots_refusal("s", "local[2]", 2, 2) is None
    assert slots_refusal("s", "local[2]", 1, 2) is None
    assert slots_refusal("s", "yarn", 40, None) is None       # unknown: not refused
    local = slots_refusal("s", "local[2]", 3, 2)
    assert local is not None and "\n" not in local
    assert local.startswith("stream s: trigger real_time: the source has 3 Kafka partitions")
    assert "runs 2 task(s) at once (master local[2])" in local and "never read" in local
    assert "REWIND_SPARK_MASTER) local[3]" in local and "processing-time trigger" in local
    cluster = slots_refusal("s", "yarn", 5, 4)
    assert cluster is not None and "spark.executor.instances x spark.executor.cores" in cluster
    assert "spark_conf" in cluster and "local[" not in cluster


def _spec(topic: str, bootstrap: str) -> StreamSpec:
    return StreamSpec(name="rts", topics=[topic], transform="x.y:Z", sink={"url": "sqlite:////tmp/rts.db"},
                      checkpoint="/tmp/rts-ck", status_dir="/tmp/rts-st", trigger={"real_time": "5 seconds"},
                      source={"format": "kafka", "options": {"kafka.bootstrap.servers": bootstrap}})


def test_check_slots_on_the_real_session_and_topics(spark: Any, platform: Any, new_topic: Any) -> None:
    """The worker's session runs local[2]: a 2-partition topic fits, a 3-partition one is refused."""
    assert spark.sparkContext.master == "local[2]"
    assert check_slots(spark, _spec(new_topic(2), platform.kafka_bootstrap), platform.kafka_bootstrap) == 2
    with pytest.raises(RealTimeRefused, match=r"has 3 Kafka partitions and the Spark application runs 2 task"):
        check_slots(spark, _spec(new_topic(3), platform.kafka_bootstrap), platform.kafka_bootstrap)
