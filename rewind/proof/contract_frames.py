"""The proof derived from a stream's contract: every Kafka record against the sink, for any stream.

Why apart from ``rewind.proof.frames`` (the demo's suite, with its windows): this proof reads
nothing but what the transform declares (``rewind.api.contract``): its tables and keys, the
``Identity`` of a valid record (a table, its identity columns, a version for ``latest`` tables),
its dead-letter table, and ``expect()``, the transform's own recomputation of what each Kafka
record becomes. So any registered stream can be proven (``dq_suite: contract``).

Two frames, each judged by the suite ``STREAM.contract.FRAME`` (``rewind.proof.checks``):

- ``coverage``: one row per Kafka record in the range and where it landed (``landed_in``):
  ``row`` (its identity's row holds it: insert-once, the row exists; ``latest``, the row's version
  is at least the record's), ``dead_letter`` (a record ``expect`` refuses, at its coordinates),
  ``behind_watermark`` (a valid record the stream routed as late, event time at or behind the
  watermark recorded with it), or what is wrong: ``missing``, ``row+dead_letter``,
  ``dead_letter_missing``, ``not_behind_watermark``.
- ``rows``: one row per row of every declared table and of the dead-letter table, with
  ``row_check``: ``ok``, ``duplicate_key`` (a declared key held twice), ``unexpected`` (an identity,
  or identity and version, that no valid Kafka record carries; a dead letter at coordinates
  ``expect`` calls valid), ``value_mismatch`` (the row's values differ from the recomputation of
  the record it stands for: for ``latest`` the record of its version, for insert-once any record
  of its identity) and ``disagrees`` naming the columns.

A transform whose output depends on processing time fails here: its rows carry identities or
values ``expect`` does not recompute, so they are ``unexpected`` or ``value_mismatch`` and the
records they stand for are ``missing``; the frames name both.

Pure (no I/O): ``rewind.proof.contract_proof`` reads Kafka and the sink.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rewind.proof.aggregates import FRAME_COLUMNS
from rewind.proof.batches import written_later
from rewind.proof.checks import COORDS
from rewind.proof.frames import range_mask
from rewind.proof.values import ANY, ValueRule, equal_values, shown
from rewind.proof.values import coords_of as _coords
from rewind.proof.values import text_key as _text

#: What ``expect`` must return beside the identity columns.
EXPECT_COLUMNS = ("reason", "event_time")
#: Columns a proof never reconciles (who wrote the row and when, not what it holds).
NOT_RECONCILED = frozenset(("batch_id", "watermark"))
#: The reason ``rewind.proof.contract_proof`` gives a record ``build`` wrote nothing for (no expect()).
FILTERED = "filtered_by_build"
#: Where a Kafka record of the range can land (``landed_in``), the problems last.
LANDED_CLASSES = ("row", "duplicate_send", "superseded", "dead_letter", "behind_watermark", "filtered", "too_large",
                  "missing", "dead_letter_missing", "row+dead_letter", "not_behind_watermark")


@dataclass
class ContractFrames:
    coverage: pd.DataFrame
    rows: pd.DataFrame
    counts: dict[str, Any]
    range: dict[str, dict[str, list[int]]]
    span: Mapping[tuple[str, int], tuple[int, int]] | None = None  # what a bounded proof read
    aggregates: pd.DataFrame | None = None  # one row per aggregate group (rewind.proof.aggregates)
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pd.DataFrame]:
        aggregates = self.aggregates if self.aggregates is not None else pd.DataFrame(columns=FRAME_COLUMNS)
        return {"coverage": self.coverage, "rows": self.rows, "aggregates": aggregates}


def build_contract_frames(expected: pd.DataFrame, sink: Mapping[str, pd.DataFrame], *, identity: Any,
                          keys: Mapping[str, Sequence[str]], dead_letter_table: str,
                          judged: np.ndarray | None = None, late_reason: str = "behind_watermark",
                          too_large_reason: str | None = None,
                          row_scope: Mapping[tuple[str, int], tuple[int, int]] | None = None,
                          not_reconciled: Collection[str] = (),
                          records_in: Mapping[tuple[str, int], tuple[int, int]] | None = None,
                          rules: Mapping[str, Mapping[str, ValueRule]] | None = None,
                          last_batch: int | None = None, later: Collection[int] | None = None,
                          past_scope: Mapping[tuple[str, int], tuple[int, int]] | None = None) -> ContractFrames:
    """Kafka records with ``expect``'s columns, and the sink's tables -> the two frames (pure).

    ``expected``: one row per Kafka record read (coordinates + ``expect`` output). ``judged``: which
    of them lie in the range (default: all); the rest are context (a ``latest`` row may hold a
    version from beyond the range). ``keys``: every sink table's key (name -> columns).
    ``row_scope``: a bounded proof's span: the sink holds only the rows its records touch, and only
    identity rows at coordinates in the span are judged (they stand for records read); other
    tables are left to a full proof. ``not_reconciled``: more columns whose values are not compared.
    ``too_large_reason``: a Kafka sink's reason for a row above its record limit (``TOO_LARGE``; None for other
    sinks, where such a dead letter at a valid record is unexpected). ``records_in``: ranges every offset of
    which is a Kafka record read, whether or not ``expected`` lists it: a ``behind_watermark`` dead letter there
    is not unexpected. ``rules``: per table, each
    column's comparison rule (``rewind.proof.values.rules_for``; default: by value type).
    ``last_batch``: the stream's last committed batch when the proof began: rows a later batch wrote
    still count as holding a record (a ``latest`` row at a newer version), but are not judged (they
    may stand for records past the range). ``later``: the batches the checkpoint planned after
    ``last_batch`` (``rewind.proof.batches``), when known. ``past_scope``: the ranges ending where the
    committed batch ended (default ``row_scope``): identity rows past them stand for no record read.

    Every record of the range lands in exactly one class of ``landed_in`` (the counts
    ``landed_<class>`` sum to ``records_in_range``): ``row`` (the record its identity's row stands
    for), ``duplicate_send`` (another record of the same identity, and version, that the row holds
    too), ``superseded`` (a ``latest`` record whose entity's row holds a newer version),
    ``dead_letter`` (refused, at its coordinates; ``dead_letters_by_reason`` splits them),
    ``behind_watermark`` (valid, routed as late), ``filtered`` (a record ``build`` writes nothing
    for, no expect(): its own rule), ``too_large`` (valid, dead-lettered by a Kafka sink because its
    row is above ``kafka.message.max.bytes``: its reason begins ``too_large_for_kafka``), or a problem:
    ``missing``, ``dead_letter_missing``, ``row+dead_letter``, ``not_behind_watermark``.
    """
    rules = rules or {}
    exp = expected.reset_index(drop=True).copy()
    judged = np.ones(len(exp), dtype=bool) if judged is None else np.asarray(judged, dtype=bool)
    ids, version = tuple(identity.columns), identity.version
    ident_rules = rules.get(identity.table, {})
    exp["_coord"] = _coords(exp)
    exp["_id"] = _text(exp, ids, ident_rules)
    valid = exp["reason"].isna().to_numpy()
    filtered = (exp["reason"] == FILTERED).to_numpy(dtype=bool) if len(exp) else np.zeros(0, dtype=bool)
    table = sink.get(identity.table, pd.DataFrame(columns=[*ids]))
    dead = _committed(sink.get(dead_letter_table, pd.DataFrame(columns=[*COORDS, "reason"])), last_batch, later)

    # dead letters: where each sits and what Kafka says of its coordinates
    d = dead.reset_index(drop=True).copy()
    d["_coord"] = _coords(d)
    by_coord = exp.drop_duplicates("_coord").set_index("_coord")
    kafka_valid = d["_coord"].map(lambda c: bool(c in by_coord.index and pd.isna(by_coord.at[c, "reason"])))
    kafka_known = d["_coord"].map(lambda c: c in by_coord.index)
    if records_in is not None and len(d):

        read = range_mask(d, dict(records_in)) & (d["reason"] == late_reason).to_numpy(dtype=bool) \
            if "reason" in d else np.zeros(len(d), dtype=bool)
        kafka_known = kafka_known | pd.Series(read, index=d.index)
    reason = d["reason"].astype(object) if "reason" in d else pd.Series([None] * len(d), dtype=object)
    wm = pd.to_datetime(d["watermark"], utc=True) if "watermark" in d else \
        pd.Series(pd.NaT, index=d.index, dtype="datetime64[ns, UTC]")
    et = d["_coord"].map(lambda c: by_coord.at[c, "event_time"] if c in by_coord.index else pd.NaT)
    et = pd.to_datetime(et, utc=True)
    is_late = (reason == late_reason).to_numpy(dtype=bool) & kafka_valid.to_numpy(dtype=bool)
    # a valid record the Kafka sink could not write (above kafka.message.max.bytes): its dead letter holds it
    too_large = reason.map(lambda r: bool(too_large_reason) and isinstance(r, str) and r.startswith(
        str(too_large_reason))).to_numpy(dtype=bool) & kafka_valid.to_numpy(dtype=bool)
    too_large_coords = set(d["_coord"][too_large])
    behind_ok = is_late & (et <= wm).fillna(False).to_numpy(dtype=bool)
    behind_coords = set(d["_coord"][behind_ok])
    late_bad_coords = set(d["_coord"][is_late & ~behind_ok])
    dead_coords = set(d["_coord"])

    # the identity table: which identity (and version) each row holds; every row, later batches too
    t = table.reset_index(drop=True).copy()
    t["_id"] = _text(t, ids, ident_rules)
    row_coord = dict(zip(t["_id"], _coords(t))) if set(COORDS) <= set(t.columns) else {}
    if version:
        row_version = {i: v for i, v in zip(t["_id"], _version_key(t[version])) if i is not None and pd.notna(v)}
        exp_version = _version_key(exp[version]) if version in exp else pd.Series([None] * len(exp))
        has_row = np.array([i in row_version and pd.notna(v) and row_version[i] >= v
                            for i, v in zip(exp["_id"], exp_version)], dtype=bool)
        newer = np.array([i in row_version and pd.notna(v) and row_version[i] > v
                          for i, v in zip(exp["_id"], exp_version)], dtype=bool)
    else:
        held = set(t["_id"].dropna())
        has_row = exp["_id"].isin(held).to_numpy()
        newer = np.zeros(len(exp), dtype=bool)
    in_dead = exp["_coord"].isin(dead_coords).to_numpy()
    row_at_coord = exp["_coord"].isin(set(_coords(t))).to_numpy() if row_coord else np.zeros(len(exp), dtype=bool)
    behind = valid & exp["_coord"].isin(behind_coords).to_numpy()
    # which record of an identity its row stands for: the one at the row's coordinates, else the
    # first (in Kafka order) of its records at the row's version; the other holders are re-sends
    holders = valid & has_row & ~newer & ~behind
    stands_for = _stands_for(exp, holders, row_coord)
    landed = np.select(
        [behind, valid & exp["_coord"].isin(late_bad_coords).to_numpy(),
         valid & row_at_coord & in_dead, holders & stands_for, holders, valid & has_row & newer,
         valid & exp["_coord"].isin(too_large_coords).to_numpy(), valid,
         ~valid & in_dead & row_at_coord, ~valid & in_dead, filtered, ~valid],
        ["behind_watermark", "not_behind_watermark", "row+dead_letter", "row", "duplicate_send", "superseded",
         "too_large", "missing", "row+dead_letter", "dead_letter", "filtered", "dead_letter_missing"],
        default="missing")
    coverage = exp[[*COORDS, *ids, "reason", "event_time"]].copy()
    if version:
        coverage[version] = exp[version]
    coverage["landed_in"] = landed.astype(object)
    coverage = _one_per_record(coverage[judged])

    judged_rows = _committed(t, last_batch, later)
    rows = _judge_rows(exp[valid], judged_rows, identity, keys.get(identity.table, ids), not_reconciled,
                       ident_rules)
    if row_scope is not None:  # and the rows a committed batch wrote past the range's end (no record read makes)
        keep = _in_scope(rows, row_scope) | written_past_end(judged_rows, past_scope or row_scope, last_batch)
        rows = rows[keep].reset_index(drop=True)
    dead_rows = _judge_dead_letters(d, by_coord, kafka_valid.to_numpy(dtype=bool), kafka_known.to_numpy(dtype=bool),
                                    is_late | too_large, dead_letter_table)
    others = [] if row_scope is not None else [
        _key_rows(name, _committed(frame, last_batch, later), keys[name], rules.get(name, {}))
        for name, frame in sink.items() if name not in (identity.table, dead_letter_table) and name in keys]
    all_rows = pd.concat([rows, dead_rows, *others], ignore_index=True)
    for c in ("table", "row_check", "identity", "disagrees"):
        if c not in all_rows:
            all_rows[c] = None
        all_rows[c] = all_rows[c].astype(object)

    got = coverage["landed_in"].value_counts().to_dict()
    checks = all_rows["row_check"].value_counts().to_dict() if len(all_rows) else {}
    refused = coverage[coverage["landed_in"] == "dead_letter"]
    counts = {"records_in_range": int(len(coverage)),
              "valid_records": int(coverage["reason"].isna().sum()),
              "identities": int(exp.loc[valid & judged, "_id"].nunique()),
              "expected_dead_letters": int((coverage["reason"].notna() & (coverage["reason"] != FILTERED)).sum()),
              "sink_rows": int(len(t)), "sink_dead_letters": int(len(d)),
              **{f"landed_{k}": int(got.get(k, 0)) for k in LANDED_CLASSES},
              **{f"landed_{k}": int(v) for k, v in got.items() if k not in LANDED_CLASSES},
              "dead_letters_by_reason": {str(k): int(v) for k, v in refused["reason"].value_counts().items()},
              **{f"rows_{k}": int(v) for k, v in checks.items()}}
    return ContractFrames(coverage, all_rows, counts, _range_doc(coverage))


def _one_per_record(coverage: pd.DataFrame) -> pd.DataFrame:
    """One row per Kafka record (a record ``build`` turns into several identity rows is one record): the
    worst of its rows' classes, problems first."""
    if not len(coverage) or not coverage.duplicated(COORDS).any():
        return coverage.reset_index(drop=True)
    rank = {c: i for i, c in enumerate(reversed(LANDED_CLASSES))}
    order = coverage["landed_in"].map(lambda c: rank.get(c, -1))
    return (coverage.assign(_rank=order).sort_values([*COORDS, "_rank"], kind="stable")
            .drop_duplicates(COORDS).drop(columns="_rank").reset_index(drop=True))


def _committed(frame: pd.DataFrame, last_batch: int | None, later: Collection[int] | None) -> pd.DataFrame:
    """The rows a proof of ``last_batch`` judges: all but those a later batch wrote (``rewind.proof.batches``)."""
    if not len(frame) or "batch_id" not in frame:
        return frame
    return frame[~written_later(frame["batch_id"], last_batch, later)]


def _stands_for(exp: pd.DataFrame, holders: np.ndarray, row_coord: Mapping[Any, Any]) -> np.ndarray:
    """Of the records whose identity's row holds them, the one each row stands for (pure)."""
    out = np.zeros(len(exp), dtype=bool)
    if not holders.any():
        return out
    idx = np.flatnonzero(holders)
    ids = exp["_id"].to_numpy(dtype=object)[idx]
    coords = exp["_coord"].to_numpy(dtype=object)[idx]
    at_row = np.array([row_coord.get(i) == c for i, c in zip(ids, coords)], dtype=bool)
    out[idx[at_row]] = True
    # identities whose row has no coordinates, or coordinates of no record read: the first holder
    placed = set(ids[at_row])
    order = sorted(range(len(idx)), key=lambda k: coords[k])
    for k in order:
        if ids[k] not in placed:
            placed.add(ids[k])
            out[idx[k]] = True
    return out


def _judge_dead_letters(d: pd.DataFrame, by_coord: pd.DataFrame, kafka_valid: np.ndarray, kafka_known: np.ndarray,
                        is_late: np.ndarray, table: str) -> pd.DataFrame:
    """Each dead letter: a duplicate key, unexpected (Kafka holds no refused record there, nor a valid one
    routed by Rewind: ``is_late``, late or too large for a Kafka sink), a reason other than the recomputed
    one (``value_mismatch``), or ok."""
    cols = [*COORDS, "reason"]
    if not len(d):
        return pd.DataFrame(columns=[*cols, "table", "row_check", "disagrees"])
    out = d[[c for c in cols if c in d.columns]].copy()
    out["table"] = table
    dup = d["_coord"].duplicated(keep=False).to_numpy()
    bad = (kafka_valid & ~is_late) | ~kafka_known
    sink_reason = d["reason"].astype(object) if "reason" in d else pd.Series([None] * len(d), dtype=object)
    want = d["_coord"].map(lambda c: by_coord.at[c, "reason"] if c in by_coord.index else None)
    reason_ok = equal_values(sink_reason, want.astype(object), ValueRule("text"))
    wrong_reason = ~dup & ~bad & ~is_late & ~reason_ok
    out["row_check"] = np.select([dup, bad, wrong_reason], ["duplicate_key", "unexpected", "value_mismatch"],
                                 default="ok").astype(object)
    out["disagrees"] = [f"reason: sink {shown(a)!r}, recomputed {shown(b)!r}" if w else None
                        for a, b, w in zip(sink_reason, want, wrong_reason)]
    return out.reset_index(drop=True)


def _judge_rows(valid: pd.DataFrame, t: pd.DataFrame, identity: Any, key: Sequence[str],
                not_reconciled: Collection[str] = (), rules: Mapping[str, ValueRule] | None = None) -> pd.DataFrame:
    """Each identity-table row: duplicate key, unexpected identity/version, or values against the
    recomputation, each column by its rule (``rewind.proof.values``)."""
    rules = rules or {}
    version = identity.version
    reconciled = [c for c in valid.columns if c in t.columns and c not in identity.columns
                  and c not in NOT_RECONCILED and c not in not_reconciled and not c.startswith("_")
                  and c not in ("reason", version)]
    out = pd.DataFrame({"table": identity.table, "identity": t["_id"]}, index=t.index)
    if version:
        out[version] = t[version]
    for c in COORDS:
        if c in t:
            out[c] = t[c]
    dup = t.duplicated(list(key), keep=False).to_numpy() if len(t) and set(key) <= set(t.columns) else \
        np.zeros(len(t), dtype=bool)
    # every (row, record of its identity [and version]) pair, compared column by column at once
    on = ["_id", version] if version else ["_id"]
    left = t[[*on, *reconciled]].assign(_pos=np.arange(len(t)))
    right = valid[[*on, *reconciled]]
    if version:
        left[version] = _version_key(left[version])
        right = right.assign(**{version: _version_key(right[version])})
    pairs = left.merge(right, on=on, how="inner", suffixes=("", "_exp"))
    bad = np.zeros((len(pairs), len(reconciled)), dtype=bool)
    for j, c in enumerate(reconciled):
        bad[:, j] = ~equal_values(pairs[c], pairs[f"{c}_exp"], rules.get(c, ANY))
    n_bad = bad.sum(axis=1)
    pairs = pairs.assign(_n_bad=n_bad, _row=np.arange(len(pairs)))
    best = pairs.sort_values(["_pos", "_n_bad"]).drop_duplicates("_pos")  # the closest record per row
    best_of = dict(zip(best["_pos"], best["_row"]))
    checks: list[str] = []
    disagree: list[str | None] = []
    for pos in range(len(t)):
        row = best_of.get(pos)
        if dup[pos]:
            checks.append("duplicate_key")
            disagree.append(None)
        elif row is None:
            checks.append("unexpected")
            disagree.append(None)
        elif n_bad[row] == 0:
            checks.append("ok")
            disagree.append(None)
        else:
            checks.append("value_mismatch")
            where = f"{identity.table} [{str(t['_id'].iat[pos]).replace(chr(31), ', ')}]"
            disagree.append("; ".join(f"{where} {c}: sink {shown(pairs.at[row, c])!r}, recomputed "
                                      f"{shown(pairs.at[row, f'{c}_exp'])!r}"
                                      for j, c in enumerate(reconciled) if bad[row, j]))
    out["row_check"] = pd.Series(checks, index=t.index, dtype=object)
    out["disagrees"] = pd.Series(disagree, index=t.index, dtype=object)
    return out.reset_index(drop=True)


def _version_key(values: pd.Series) -> pd.Series:
    """Versions as exact, joinable numbers: times as UTC nanoseconds at microseconds (what every sink
    stores; a sink reads ns, Arrow hands ``build``'s rows in us), integers as Int64, else float64."""
    s = values.reset_index(drop=True)
    if pd.api.types.is_datetime64_any_dtype(s.dtype) or (
            s.dtype == object and s.dropna().map(lambda v: isinstance(v, (pd.Timestamp, np.datetime64))
                                                 or hasattr(v, "tzinfo")).all() and s.notna().any()):
        t = pd.to_datetime(s, utc=True).dt.floor("us").dt.as_unit("ns")
        return pd.Series(pd.array(t.array.asi8, dtype="Int64").copy(), index=values.index).mask(t.isna().to_numpy())
    if pd.api.types.is_integer_dtype(s.dtype):
        return values.astype("Int64")
    out = pd.to_numeric(values, errors="coerce")
    if pd.api.types.is_float_dtype(out.dtype) and out.dropna().map(float.is_integer).all() \
            and (out.dropna().abs() <= 2 ** 53).all():
        return out.astype("Int64")  # a column with a null read as float
    return out


def _in_scope(rows: pd.DataFrame, scope: Mapping[tuple[str, int], tuple[int, int]]) -> np.ndarray:
    """Rows at coordinates inside ``scope`` (none when the table has no coordinates)."""
    if not len(rows) or not set(COORDS) <= set(rows.columns):
        return np.zeros(len(rows), dtype=bool)

    return range_mask(rows, dict(scope))


#: An offset beyond any partition's end: ``[end, PAST_ANY_OFFSET)`` is "at or past the end".
PAST_ANY_OFFSET = 2 ** 62


def written_past_end(frame: pd.DataFrame, scope: Mapping[tuple[str, int], tuple[int, int]],
                     last_batch: int | None) -> np.ndarray:
    """Rows a committed batch (``batch_id`` <= ``last_batch``) wrote at coordinates at or past the end of
    their partition's range (pure; partitions the range does not hold are not judged). Such a batch read only
    records below those ends, so no record makes these rows: a proof of a span judges them with its own
    (a replay's rows, ``batch_id`` null, and later batches' are not judged)."""
    if last_batch is None or not len(frame) or not {*COORDS, "batch_id"} <= set(frame.columns):
        return np.zeros(len(frame), dtype=bool)

    batch = pd.to_numeric(frame["batch_id"], errors="coerce")
    committed = (batch <= last_batch).fillna(False).to_numpy(dtype=bool)
    # only in the span's own partitions: a span of a partition subset (a replay's) says nothing of the others
    return committed & range_mask(frame, {k: (end, PAST_ANY_OFFSET) for k, (_, end) in scope.items()})


def _key_rows(name: str, frame: pd.DataFrame, key: Sequence[str],
              rules: Mapping[str, ValueRule] | None = None) -> pd.DataFrame:
    """Rows of a table the proof cannot recompute (an aggregate): only its declared key is judged."""
    dup = frame.duplicated(list(key), keep=False).to_numpy() if len(frame) else np.zeros(0, dtype=bool)
    return pd.DataFrame({"table": name, "identity": _text(frame, key, rules).to_numpy(),
                         "row_check": np.where(dup, "duplicate_key", "ok").astype(object), "disagrees": None})


def _range_doc(coverage: pd.DataFrame) -> dict[str, dict[str, list[int]]]:
    doc: dict[str, dict[str, list[int]]] = {}
    if not len(coverage):
        return doc
    spans = coverage.groupby(["topic", "partition"])["offset"].agg(["min", "max"])
    for (topic, part), row in spans.iterrows():
        doc.setdefault(str(topic), {})[str(int(part))] = [int(row["min"]), int(row["max"]) + 1]
    return doc
