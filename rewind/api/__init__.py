"""What a stream author imports: the transform contract, its declarations and its tables.

Nothing here starts Spark, opens a sink or imports Airflow: ``import rewind.api`` works with neither
PySpark nor Airflow installed (``tests/test_layout.py``), so a stream's package can be linted,
unit-tested and imported anywhere. Running it is ``rewind.driver``'s; proving it ``rewind.proof``'s.
"""

from rewind.api.contract import RECORD_COLUMNS, Transform, TransformRefused
from rewind.api.declarations import Aggregate, Identity, Measure
from rewind.api.late import BEHIND_WATERMARK, LATE_CANDIDATE, candidates
from rewind.api.tables import Column, TableSpec, output_table

__all__ = ["BEHIND_WATERMARK", "LATE_CANDIDATE", "RECORD_COLUMNS", "Aggregate", "Column", "Identity", "Measure",
           "TableSpec", "Transform", "TransformRefused", "candidates", "output_table"]
