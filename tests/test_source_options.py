"""The live stream's source options (``rewind.driver.source.source_options``): the defaults a registry entry may
leave out, and that the entry's own options always win (pure logic, no Kafka)."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.driver.source import source_options
from rewind.registry import StreamSpec


def spec(**options: str) -> Any:
    return StreamSpec(name="s", topics=["a", "b"], transform="m:T", sink={"url": "sqlite:///x.db"},
                      checkpoint="/c", status_dir="/s", source={"options": options})


def test_a_new_stream_without_a_start_reads_from_the_earliest_offset_committed_records_only() -> None:
    """Spark's own default is latest: an entry that said nothing skipped its topics' records and its proof,
    which answers for every record below the committed end, failed on all of them."""
    opts = source_options(spec(), "k:9092")
    assert opts == {"kafka.bootstrap.servers": "k:9092", "subscribe": "a,b", "kafka.isolation.level": "read_committed",
                    "startingOffsets": "earliest"}


@pytest.mark.parametrize("given", [{"startingOffsets": "latest"}, {"STARTINGOFFSETS": "latest"},
                                   {"startingTimestamp": "1700000000000"},
                                   {"startingOffsetsByTimestamp": '{"a": {"0": 1700000000000}}'}])
def test_the_entrys_own_start_wins(given: dict[str, str]) -> None:
    opts = source_options(spec(**given), "k:9092")
    assert "startingOffsets" not in opts or opts["startingOffsets"] == given.get("startingOffsets")
    assert all(opts[k] == v for k, v in given.items())


def test_the_entrys_isolation_level_wins() -> None:
    assert source_options(spec(**{"kafka.isolation.level": "read_uncommitted"}), "k:9092")[
        "kafka.isolation.level"] == "read_uncommitted"
