"""What an upgrade may change, pure: the modes, the refusals before anything stops, the output
tables' compatibility, and what Spark's own state check said.

The modes (as the Flink Kubernetes Operator names them, ``UpgradeMode``):

- ``savepoint``: stop after the batch in flight with a verified savepoint, restore it into a fresh
  checkpoint, start the new version there;
- ``last-state``: stop after the batch in flight (a savepoint is still taken, for the rollback) and
  start the new version on the same checkpoint;
- ``blue-green``: the new version starts beside the live one from a savepoint, into shadow tables, is proven
  there, then takes over (``rewind.upgrade.bluegreen``);
- ``stateless``: stop, start the new version on a new checkpoint that begins at the committed
  offsets, state dropped. Refused for a stream whose checkpoint holds state (its deduplications and
  windows would start empty: windows open at the switch would be emitted from half their rows),
  unless forced. The new checkpoint holds only its starting offsets (``sources/0/0``), which Spark's
  connector reads itself and a driver hands Rewind's Python source (``rewind.driver.initial_offsets``).

The output tables (``table_changes``): a table or a nullable column added is fine (a sink adds
columns, old rows read NULL); a key, a type, an ``on_conflict``, a version column, a column's
nullability changed, or a table or column removed, is refused: old rows and the proofs depend on
them. The state (``spark_verdict``): Spark's own StateSchemaCompatibilityChecker runs when the new
version plans its first batch on the restored state, in the pre-flight; its error names what
changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rewind.errors import Refused
from rewind.supervision.causes import headline

Mode = Literal["stateless", "last-state", "savepoint", "blue-green"]
MODES: tuple[Mode, ...] = ("stateless", "last-state", "savepoint", "blue-green")
#: Registry keys an upgrade cannot change: they say which stream this is and where its data lives.
FIXED = {"checkpoint": "the checkpoint location", "status_dir": "the status directory", "topics": "the topics it reads",
         "sink.url": "the sink", "sink.table_prefix": "the sink's table prefix"}


class UpgradeRefused(Refused):
    """The upgrade was refused before the live stream was touched; the message says what to change."""


class Incompatible(UpgradeRefused):
    """The new version cannot take over the stream's state or output tables; the message says which
    and how."""


@dataclass(frozen=True)
class Facts:
    """What the upgrade found before touching anything (read at the I/O edge)."""

    mode: str
    force: bool
    old: Any  # StreamSpec
    new: Any  # StreamSpec
    committed_batch: int | None  # the live checkpoint's last committed batch
    stateful_operators: tuple[str, ...]  # the live checkpoint's state operators


def _get(spec: Any, dotted: str) -> Any:
    value = spec
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def refusals(f: Facts) -> list[str]:
    """Why the upgrade cannot run as asked (empty: it may go on to the pre-flight)."""
    out: list[str] = []
    if f.mode not in MODES:
        out.append(f"mode {f.mode!r} is not one of {', '.join(MODES)}")
    if f.old.config_hash() == f.new.config_hash():
        out.append(f"the new entry of {f.old.name} is the running one (config hash {f.old.config_hash()}): nothing "
                   "to upgrade")
    for key, what in FIXED.items():
        if _get(f.old, key) != _get(f.new, key):
            out.append(f"{key} changed ({_get(f.old, key)!r} -> {_get(f.new, key)!r}): an upgrade keeps {what}; a "
                       "different one is a new stream")
    if f.committed_batch is None:
        out.append(f"{f.old.name} has no committed batch yet: there is no state or position to carry over; change "
                   "its registry entry directly")
    if f.mode == "stateless":
        if f.stateful_operators and not f.force:
            out.append(f"mode stateless drops the state of {len(f.stateful_operators)} stateful operator(s) "
                       f"({', '.join(f.stateful_operators)}): their deduplications and windows would start empty; "
                       "use last-state or savepoint, or --force to drop it")
    return out


def notes(f: Facts) -> list[str]:
    """What the upgrade does not change although the entry says so (printed, not refused)."""
    key = "spark.sql.shuffle.partitions"
    old, new = f.old.spark_conf.get(key), f.new.spark_conf.get(key)
    if old != new and f.mode != "stateless" and f.stateful_operators:
        return [f"{key} {old} -> {new} does not change the state partitions of an existing checkpoint: `rewind "
                f"checkpoint repartition {f.old.name} --partitions N` does"]
    return []


# --------------------------------------------------------------------------- output tables
@dataclass(frozen=True)
class Change:
    table: str
    what: str
    ok: bool


def table_changes(old: Sequence[Any], new: Sequence[Any]) -> list[Change]:
    """Every difference between the old and the new version's tables (``TableSpec``s), each judged."""
    out: list[Change] = []
    before, after = {t.name: t for t in old}, {t.name: t for t in new}
    for name in sorted(set(before) - set(after)):
        out.append(Change(name, "table removed: its rows stay in the sink and the proofs read it; keep declaring it",
                          False))
    for name in sorted(set(after) - set(before)):
        out.append(Change(name, "table added", True))
    for name in sorted(set(before) & set(after)):
        a, b = before[name], after[name]
        if a.key != b.key:
            out.append(Change(name, f"key changed {list(a.key)} -> {list(b.key)}: rows already written are keyed the "
                                    "old way", False))
        if a.on_conflict != b.on_conflict or a.version != b.version:
            out.append(Change(name, f"on_conflict changed {a.on_conflict}/{a.version} -> {b.on_conflict}/{b.version}",
                              False))
        cols_a, cols_b = {c.name: c for c in a.columns}, {c.name: c for c in b.columns}
        for col in [c for c in a.columns if c.name not in cols_b]:
            out.append(Change(name, f"column {col.name} removed: old rows hold it; keep it (nullable)", False))
        for col in b.columns:
            was = cols_a.get(col.name)
            if was is None:
                out.append(Change(name, f"column {col.name} ({col.type}) added" + ("; old rows read NULL"
                                  if col.nullable else " NOT NULL: old rows have no value; make it nullable"),
                                  col.nullable))
            elif was.type != col.type:
                out.append(Change(name, f"column {col.name} type changed {was.type} -> {col.type}", False))
            elif was.nullable != col.nullable:
                out.append(Change(name, f"column {col.name} changed {'NULL' if was.nullable else 'NOT NULL'} -> "
                                        f"{'NULL' if col.nullable else 'NOT NULL'}: the sink's column keeps its "
                                        "constraint", False))
    return out


def contract_changes(old: Any, new: Any) -> list[Change]:
    """The proofs' anchors (``Transform.identity``, the dead-letter table) and the tables, judged."""
    out = table_changes(old.tables, new.tables)
    if old.identity != new.identity:
        out.append(Change(new.identity.table, f"identity changed {old.identity} -> {new.identity}: the proofs "
                                              "find each record's row by it", False))
    before = {a.table: a for a in getattr(old, "aggregates", ())}  # Aggregate declarations, where the contract has them
    after = {a.table: a for a in getattr(new, "aggregates", ())}
    for table in sorted(set(before) | set(after)):
        if table in before and before.get(table) != after.get(table):
            out.append(Change(table, f"aggregate changed {before[table]} -> {after.get(table)}: the totals already "
                                     "written are over the old keys, window or measures", False))
    if old.dead_letter_table != new.dead_letter_table:
        out.append(Change(new.dead_letter_table, f"dead-letter table changed {old.dead_letter_table} -> "
                                                 f"{new.dead_letter_table}", False))
    return out


def incompatible(changes: Sequence[Change]) -> list[str]:
    return [f"table {c.table}: {c.what}" for c in changes if not c.ok]


# --------------------------------------------------------------------------- Spark's verdict
#: Spark's error classes that mean "the new version cannot read the stream's state", and what to say.
STATE_ERRORS = {
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": "the state key schema changed",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE": "the state value schema changed",
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION": "the state value schema cannot evolve that way",
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE": "a state column family's schema changed",
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": "the stateful operators changed (added, removed or "
                                                               "reordered)",
    "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY": "the new version has stateful operators the old one had not",
    "STATE_STORE_KEY_ROW_FORMAT_VALIDATION_FAILURE": "the state key rows do not match the new schema",
    "STATE_STORE_VALUE_ROW_FORMAT_VALIDATION_FAILURE": "the state value rows do not match the new schema",
}
_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)?)\]")


@dataclass(frozen=True)
class SparkVerdict:
    state: bool  # the state is incompatible (else: the new version failed for another reason)
    error_class: str | None
    reason: str


def spark_verdict(text: str) -> SparkVerdict:
    """What a failed pre-flight query's exception says, in one line."""
    classes = _CLASS.findall(text or "")
    for cls in classes:
        base = cls.split(".")[0]
        if base in STATE_ERRORS:
            detail = _schemas(text)
            return SparkVerdict(True, cls, f"{STATE_ERRORS[base]} (Spark: {cls}{'; ' + detail if detail else ''})")
    return SparkVerdict(False, classes[0] if classes else None, short_cause(text))




def short_cause(text: str) -> str:
    """The line that says what went wrong (``rewind.supervision.causes.headline``: the one rule of
    every verdict)."""
    return headline(text, 600)


def _schemas(text: str) -> str:
    m = re.search(r"(Existing \w+_schema=.*?and new \w+_schema=[^.\n]*)", text)
    if m:
        return m.group(1)[:500]
    m = re.search(r"(Stateful operators in the metadata: \[[^\]]*\]; Stateful operators in current batch: "
                  r"\[[^\]]*\])", text)
    return m.group(1)[:500] if m else ""
