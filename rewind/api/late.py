"""Records behind the watermark, as a stream author marks them: the kind of row and the dead-letter reason.

Why in the api: a stream's ``build`` tags the rows its first stateful operator reads with
``candidates`` (or returns them under ``LATE_CANDIDATE``), and the proofs read ``BEHIND_WATERMARK``;
what the driver does with them (keep exactly those Spark drops) is ``rewind.driver.late_routing``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BEHIND_WATERMARK", "LATE_CANDIDATE", "candidates"]

#: ``kind`` of an output row that is a candidate for the dead-letter table (see ``candidates``).
LATE_CANDIDATE = "late_candidate"
#: The dead-letter reason of a record Spark's stateful operators would drop as late.
BEHIND_WATERMARK = "behind_watermark"

def candidates(df: Any, kind_column: str = "kind") -> Any:
    """Tag ``df`` (the rows entering the transform's first stateful operator, after
    ``withWatermark``) as dead-letter candidates; union the result into the transform's output."""
    from pyspark.sql import functions as F

    return df.withColumn(kind_column, F.lit(LATE_CANDIDATE))
