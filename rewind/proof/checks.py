"""What the exactly-once proof checks: one named expectation per guarantee, over four frames.

Why a module of data: the suite is the contract of the proof, so it is written down once, in
plain words, apart from how frames are built (``rewind.proof.frames``) and how Great
Expectations runs it (``rewind.proof.gx``). Every expectation carries a name that says what it
proves; a failure in the task log, in ``proof.json`` and in the Data Docs is that name and that
sentence. Each frame is validated by its own Expectation Suite, ``STREAM.exactly_once.FRAME``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The suite a stream names in the registry (``dq_suite``); the only one so far.
SUITE = "exactly_once"
#: Kafka coordinates: what ties a sink row to the record it came from.
COORDS = ["topic", "partition", "offset"]
FRAMES = ("events", "dead_letter", "coverage", "aggregates")
#: landed_in values of a correct sink (``missing`` is judged by its own expectation).
LANDED_OK = ("events", "dead_letter", "duplicate_send", "behind_watermark")

AGGREGATES_NOTE = ("One row per group (window x keys) of every aggregate table: the sink's values beside their "
                   "recomputation from the Kafka records; aggregate_state is match, mismatch, missing (closed by the "
                   "stream's watermark but absent), pending (not closed yet), unexpected (no record makes it) or "
                   "duplicate; disagrees names the table, the group and both values.")
#: What each frame holds (the suite's notes in the Data Docs).
FRAME_NOTES = {
    "events": "The sink's event rows whose Kafka coordinates are in the range; kafka_event_id is the id of the "
              "valid Kafka record at those coordinates.",
    "dead_letter": "The sink's dead-letter rows in the range; kafka_verdict is the stream's verdict (its expect()) "
                   "on the Kafka record at those coordinates.",
    "coverage": "One row per Kafka data record in the range; landed_in says where it is in the sink.",
    "aggregates": AGGREGATES_NOTE,
}


@dataclass(frozen=True)
class Check:
    """One expectation: its name (what it proves), the frame it reads, the GE class and arguments."""

    name: str
    frame: str
    expectation: str  # a class of great_expectations.expectations
    kwargs: dict[str, Any]
    proves: str


def _not_null(prefix: str, frame: str, columns: Sequence[str], what: str) -> list[Check]:
    return [Check(f"{c if c.startswith(prefix) else f'{prefix}_{c}'}_not_null", frame,
                  "ExpectColumnValuesToNotBeNull", {"column": c}, f"Every {what} row has a value in {c} (no nulls).")
            for c in columns]


#: What every suite checks of aggregate tables (frame ``aggregates``, ``rewind.proof.aggregates``).
AGGREGATE_CHECKS: tuple[Check, ...] = (
    Check("no_duplicate_aggregate_rows", "aggregates", "ExpectColumnValuesToNotBeInSet",
          {"column": "aggregate_state", "value_set": ["duplicate"]},
          "Each group (window x keys) of an aggregate table has one row."),
    Check("aggregates_reconcile", "aggregates", "ExpectColumnValuesToNotBeInSet",
          {"column": "aggregate_state", "value_set": ["mismatch", "unexpected"]},
          "Every aggregate row holds the values recomputed from all the Kafka records of its group (all "
          "partitions, the whole window; each column by its type: integers and decimals exactly, doubles within "
          "their tolerance), and no row stands for a group no record makes."),
    Check("closed_aggregates_present", "aggregates", "ExpectColumnValuesToNotBeInSet",
          {"column": "aggregate_state", "value_set": ["missing"]},
          "Every group the stream's watermark has closed (and that holds records) has its row."),
)


CHECKS: tuple[Check, ...] = (
    Check("no_duplicate_event_ids", "events", "ExpectColumnValuesToBeUnique", {"column": "event_id"},
          "No event is in the sink twice: event_id is unique among the sink's events in the range."),
    *_not_null("event", "events", ["event_id"], "sink event"),
    Check("no_duplicate_event_coordinates", "events", "ExpectCompoundColumnsToBeUnique", {"column_list": COORDS},
          "No Kafka record became two events: (topic, partition, offset) is unique among the sink's events."),
    *_not_null("event", "events", [*COORDS, "key", "event_time"], "sink event"),
    Check("events_match_kafka", "events", "ExpectColumnPairValuesToBeEqual",
          {"column_A": "event_id", "column_B": "kafka_event_id", "ignore_row_if": "both_values_are_missing"},
          "Nothing is in the sink that Kafka does not hold: each sink event's id equals the id of the valid Kafka "
          "record at its (topic, partition, offset)."),
    Check("no_duplicate_dead_letter_coordinates", "dead_letter", "ExpectCompoundColumnsToBeUnique",
          {"column_list": COORDS}, "No Kafka record is dead-lettered twice: (topic, partition, offset) is unique "
                                   "in the dead-letter table."),
    *_not_null("dead_letter", "dead_letter", [*COORDS, "reason"], "dead-letter"),
    Check("dead_letters_match_kafka", "dead_letter", "ExpectColumnValuesToBeInSet",
          {"column": "dead_letter_check", "value_set": ["dead", "behind_watermark"]},
          "Every dead letter is a malformed or late Kafka record at its coordinates (the classifier says 'dead'), "
          "or a valid record whose event time is at or behind the watermark recorded with it (reason "
          "behind_watermark: Spark's stateful operators would have dropped it)."),
    Check("no_kafka_record_missing", "coverage", "ExpectColumnValuesToNotBeInSet",
          {"column": "landed_in", "value_set": ["missing"]},
          "Completeness: every Kafka data record in the range is in the sink (its event, or its dead letter, "
          "also when it was behind the watermark)."),
    Check("each_kafka_record_lands_once", "coverage", "ExpectColumnValuesToBeInSet",
          {"column": "landed_in", "value_set": [*LANDED_OK, "missing"]},
          "Each Kafka record is in exactly one place: its event at its own coordinates, its dead letter (also "
          "behind_watermark), or (a duplicate send) the one event row of its id at another record carrying that id."),
    *AGGREGATE_CHECKS,
)


#: The suite of any stream proven from its contract (``dq_suite: contract``): three frames built by
#: ``rewind.proof.contract_frames`` and ``rewind.proof.aggregates`` from what the transform declares.
CONTRACT_SUITE = "contract"
CONTRACT_FRAME_NOTES = {
    "coverage": "One row per Kafka record in the range; landed_in says where it is: its identity's row, its dead "
                "letter, behind the watermark, or too large for a Kafka sink (a dead letter saying so).",
    "rows": "One row per sink row of every declared table; row_check says whether its key is unique and whether its "
            "identity, version and values are what the transform recomputes from Kafka (its expect(), or its "
            "build() run as a bounded batch over the proved offsets).",
    "aggregates": AGGREGATES_NOTE,
}
CONTRACT_CHECKS: tuple[Check, ...] = (
    Check("no_kafka_record_missing", "coverage", "ExpectColumnValuesToNotBeInSet",
          {"column": "landed_in", "value_set": ["missing", "dead_letter_missing"]},
          "Completeness: every Kafka record in the range is reflected in a row that carries its identity (for a "
          "'latest' table, at its version or a later one), or is in the dead-letter table."),
    Check("each_kafka_record_lands_once", "coverage", "ExpectColumnValuesToBeInSet",
          {"column": "landed_in", "value_set": ["row", "duplicate_send", "superseded", "dead_letter",
                                                "behind_watermark", "filtered", "too_large", "missing",
                                                "dead_letter_missing"]},
          "Each Kafka record is in one place: never both a row and a dead letter, and a record dead-lettered as "
          "behind_watermark has an event time at or behind the watermark recorded with it."),
    Check("declared_keys_unique", "rows", "ExpectColumnValuesToNotBeInSet",
          {"column": "row_check", "value_set": ["duplicate_key"]},
          "Uniqueness: no declared key (of any output table, and of the dead-letter table) is held twice."),
    Check("rows_match_kafka", "rows", "ExpectColumnValuesToBeInSet",
          {"column": "row_check", "value_set": ["ok", "duplicate_key"]},
          "Nothing is in the sink that Kafka does not hold, and every row holds what the transform recomputes for the "
          "record it stands for (its expect(), or its build() over the proved offsets; values reconciled column by "
          "column; 'disagrees' names them)."),
    *AGGREGATE_CHECKS,
)
