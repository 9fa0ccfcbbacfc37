"""Shadow mode's comparison: what the replay produced (shadow tables) against the main tables.

It answers the on-call question "what would an into-sink replay of this range change?":
- events (by event_id): ids only in the shadow (an into-sink replay would restore them), ids
  the main tables hold in the range but the replay did not produce (e.g. a transform fix
  now dead-letters them), and ids in both whose content differs;
- dead letters (by topic/partition/offset): only in shadow, only in main, reason differs;
- aggregates (by group): the shadow's recomputed rows that main lacks or holds with other values.
An id the main tables hold at other coordinates (a duplicate send outside the range) is in
main already, so it is not "only in shadow".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import sqlalchemy as sa

from rewind.kafka.types import TP
from rewind.proof.aggregates import group_text, value_columns
from rewind.proof.values import ANY, equal_values, rules_for
from rewind.sink.dialects import coordinates_in

EXAMPLES = 5
IN_CHUNK = 500  # values per IN (...) list: well under every database's parameter limit
EVENT_FIELDS = ("key", "amount", "event_time")


def read_by_ids(sink: Any, ids: Sequence[str]) -> pd.DataFrame:
    frames = [sink.read_rows("events", lambda t, chunk=ids[i:i + IN_CHUNK]: t.c.event_id.in_(chunk))
              for i in range(0, len(ids), IN_CHUNK)]
    return pd.concat(frames, ignore_index=True) if frames else sink.read_rows("events", lambda t: sa.false())


def _examples(frame: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for rec in frame.head(EXAMPLES)[list(columns)].to_dict(orient="records"):
        out.append({k: (v.isoformat() if isinstance(v, pd.Timestamp) else None if v is pd.NA else v)
                    for k, v in rec.items()})
    return out


def compare_events(main: Any, shadow: Any, where: Any) -> dict[str, Any]:
    sh = shadow.read_rows("events", where)
    mn = main.read_rows("events", where)
    in_main = set(mn["event_id"])
    elsewhere = read_by_ids(main, sorted(set(sh["event_id"]) - in_main))
    known = in_main | set(elsewhere["event_id"])
    only_shadow = sh[~sh["event_id"].isin(known)]
    only_main = mn[~mn["event_id"].isin(set(sh["event_id"]))]
    both = sh.merge(pd.concat([mn, elsewhere], ignore_index=True).drop_duplicates("event_id"), on="event_id",
                    suffixes=("_shadow", "_main"))
    differs = pd.Series(False, index=both.index)
    for f in EVENT_FIELDS:
        a, b = both[f"{f}_shadow"], both[f"{f}_main"]
        differs |= ~((a == b) | (a.isna() & b.isna())).astype(bool)
    cols = ["event_id", "topic", "partition", "offset"]
    return {"shadow": int(len(sh)), "main_in_range": int(len(mn)), "main_elsewhere": int(len(elsewhere)),
            "only_in_shadow": int(len(only_shadow)), "only_in_main": int(len(only_main)),
            "differing": int(differs.sum()),
            "examples": {"only_in_shadow": _examples(only_shadow, cols), "only_in_main": _examples(only_main, cols),
                         "differing": _examples(both[differs], ["event_id", *(f"{f}_{s}" for f in EVENT_FIELDS
                                                                              for s in ("shadow", "main"))])}}


def compare_dead_letters(main: Any, shadow: Any, where: Any) -> dict[str, Any]:
    coords = ["topic", "partition", "offset"]
    sh = shadow.read_rows("dead_letter", where)
    mn = main.read_rows("dead_letter", where)
    merged = sh.merge(mn, on=coords, how="outer", suffixes=("_shadow", "_main"), indicator=True)
    only_shadow = merged[merged["_merge"] == "left_only"]
    only_main = merged[merged["_merge"] == "right_only"]
    both = merged[merged["_merge"] == "both"]
    differing = both[both["reason_shadow"] != both["reason_main"]]
    return {"shadow": int(len(sh)), "main_in_range": int(len(mn)), "only_in_shadow": int(len(only_shadow)),
            "only_in_main": int(len(only_main)), "differing": int(len(differing)),
            "examples": {"only_in_shadow": _examples(only_shadow, coords), "only_in_main": _examples(only_main, coords),
                         "differing": _examples(differing, [*coords, "reason_shadow", "reason_main"])}}


def compare_aggregate(main: Any, shadow: Any, agg: Any) -> dict[str, Any]:
    """The shadow's rows of one aggregate table against main's rows of the same groups (values by
    ``rewind.proof.values``' rule for each column's type)."""

    rules = rules_for(shadow.specs[agg.table])
    sh = shadow.read_table(agg.table)
    mn = main.read_table(agg.table)
    sh["_g"], mn["_g"] = group_text(sh, agg), group_text(mn, agg)
    values = value_columns(shadow.specs[agg.table].column_names, agg)
    merged = sh.merge(mn[mn["_g"].isin(set(sh["_g"]))][["_g", *values]], on="_g", how="left",
                      suffixes=("_shadow", "_main"), indicator=True)
    only_shadow = merged[merged["_merge"] == "left_only"]
    both = merged[merged["_merge"] == "both"].reset_index(drop=True)
    differs = pd.Series(False, index=both.index)
    for v in values:
        differs |= ~pd.Series(equal_values(both[f"{v}_shadow"], both[f"{v}_main"], rules.get(v, ANY)),
                              index=both.index)
    cols = [*agg.group_columns, *(f"{v}_{w}" for v in values for w in ("shadow", "main"))]
    return {"shadow": int(len(sh)), "only_in_shadow": int(len(only_shadow)), "differing": int(differs.sum()),
            "same": int(len(both) - differs.sum()),
            "examples": {"only_in_shadow": _examples(only_shadow, list(agg.group_columns)),
                         "differing": _examples(both[differs], [c for c in cols if c in both.columns])}}


def compare_shadow(main: Any, shadow: Any, ranges: Mapping[TP, tuple[int, int]], transform: Any) -> dict[str, Any]:
    """The comparison of the (demo-shaped) shadow tables with the main tables over the replayed range."""
    where = coordinates_in(ranges)
    windows = next(a for a in transform.aggregates if a.table == "window_results")
    out: dict[str, Any] = {"events": compare_events(main, shadow, where),
                           "dead_letter": compare_dead_letters(main, shadow, where),
                           "windows": compare_aggregate(main, shadow, windows)}
    out["identical"] = all(out[t]["only_in_shadow"] == 0 and out[t]["differing"] == 0
                           and out[t].get("only_in_main", 0) == 0 for t in ("events", "dead_letter", "windows"))
    out["main_tables"] = {t: main.table_name(t) for t in ("events", "dead_letter", "window_results")}
    out["shadow_tables"] = {t: shadow.table_name(t) for t in ("events", "dead_letter", "window_results")}
    return out


def compare_tables(main: Any, shadow: Any, ranges: Mapping[TP, tuple[int, int]], transform: Any) -> dict[str, Any]:
    """Any stream's comparison, table by table by its declared key: rows only in the shadow, only in main
    (for tables with Kafka coordinates, in the range), and rows whose other columns differ."""
    where = coordinates_in(ranges)
    out: dict[str, Any] = {}
    for spec in transform.tables:
        coords = {"topic", "partition", "offset"} <= set(spec.column_names)
        sh = shadow.read_rows(spec.name, where) if coords else shadow.read_table(spec.name)
        key = list(spec.key)
        if coords:
            mn = main.read_rows(spec.name, where)
        else:  # the main rows of the keys the shadow holds
            keys = list(dict.fromkeys(zip(*[sh[c].tolist() for c in key])))
            parts = [main.read_rows(spec.name, lambda t, some=keys[i:i + IN_CHUNK], key=key: sa.tuple_(
                *[t.c[c] for c in key]).in_(some)) for i in range(0, len(keys), IN_CHUNK)]
            mn = pd.concat(parts, ignore_index=True) if parts else main.read_rows(spec.name, lambda t: sa.false())
        merged = sh.merge(mn, on=key, how="outer", suffixes=("_shadow", "_main"), indicator=True)
        both = merged[merged["_merge"] == "both"]
        others = [c for c in spec.column_names if c not in key and c != "batch_id"]
        differs = pd.Series(False, index=both.index)
        for c in others:
            a, b = both[f"{c}_shadow"], both[f"{c}_main"]
            differs |= ~((a == b).fillna(False) | (a.isna() & b.isna()))
        out[spec.name] = {"shadow": int(len(sh)), "only_in_shadow": int((merged["_merge"] == "left_only").sum()),
                          "only_in_main": int((merged["_merge"] == "right_only").sum()) if coords else 0,
                          "differing": int(differs.sum()), "same": int(len(both) - differs.sum()),
                          "examples": {"only_in_shadow": _examples(merged[merged["_merge"] == "left_only"], key),
                                       "differing": _examples(both[differs], key)}}
    out["identical"] = all(v["only_in_shadow"] == 0 and v["differing"] == 0 and v["only_in_main"] == 0
                           for v in out.values())
    out["main_tables"] = {t.name: main.table_name(t.name) for t in transform.tables}
    out["shadow_tables"] = {t.name: shadow.table_name(t.name) for t in transform.tables}
    return out
