"""The one line a person reads first: ``PASS``, ``FAIL`` or ``NOTHING TO PROVE``, with the figures that matter.

Why: ``rewind verify`` printed only its JSON summary, forty lines in which the verdict was one key.
A person at a terminal reads this line; a script asks for ``--json``. Pure: a summary dict in, a line out.
"""

from __future__ import annotations

from typing import Any

#: Where a summary keeps its record count (``ExactlyOnceReport`` and ``ContractReport`` name it differently).
RECORD_KEYS = ("kafka_records", "records_in_range")


def problems_of(summary: dict[str, Any]) -> dict[str, int]:
    """Each problem of a summary and how many rows it has: list fields (``{"count": n}``) and duplicate counts."""
    out: dict[str, int] = {}
    for key, value in summary.items():
        if isinstance(value, dict) and isinstance(value.get("count"), int) and value["count"] > 0:
            out[key] = value["count"]
        elif key.startswith("duplicate_") and key.endswith("_rows") and isinstance(value, int) and value > 0:
            out[key] = value
    return out


#: How a contract proof's classes of Kafka records read in a line (``landed_<class>``), in order.
CLASS_WORDS = (("row", "rows"), ("duplicate_send", "duplicate sends"), ("superseded", "superseded versions"),
               ("dead_letter", "dead letters"), ("behind_watermark", "behind the watermark"),
               ("filtered", "written nowhere by build()"))


def classes_text(summary: dict[str, Any]) -> str:
    """``28,930 rows + 1,070 duplicate sends + ...``: where the range's records went (contract proofs),
    or '' when the summary has no classes."""
    parts = [f"{summary[f'landed_{k}']:,} {words}" for k, words in CLASS_WORDS
             if isinstance(summary.get(f"landed_{k}"), int) and summary[f"landed_{k}"] > 0]
    reasons = summary.get("dead_letters_by_reason")
    if parts and isinstance(reasons, dict) and reasons:
        parts = [p + (f" ({', '.join(f'{r} {n:,}' for r, n in sorted(reasons.items()))})"
                      if p.endswith("dead letters") else "") for p in parts]
    return " + ".join(parts)


def verdict_line(stream: str, summary: dict[str, Any]) -> str:
    """``PASS demo: 12,000 Kafka records ...``, ``FAIL demo: missing_events 3, ...`` or ``NOTHING TO PROVE ...``."""
    if summary.get("nothing_to_prove"):
        return f"NOTHING TO PROVE {stream}: {summary['nothing_to_prove']}"
    records = next((summary[k] for k in RECORD_KEYS if isinstance(summary.get(k), int)), None)
    scope = f"{records:,} Kafka records" if records is not None else "the Kafka records"
    if summary.get("ok"):
        classes = classes_text(summary)
        return (f"PASS {stream}: {scope} in the proved range" + (f" = {classes}" if classes else "")
                + ", each reflected in the sink exactly once")
    problems = problems_of(summary)
    listed = ", ".join(f"{k} {n:,}" for k, n in problems.items()) or "see the JSON (--json)"
    return f"FAIL {stream}: {listed} (of {scope})"
