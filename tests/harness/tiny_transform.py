"""The smallest transform docs/add-your-stream.md allows (``tables`` and a ``build`` returning a dict; stateless, no
``event_time`` or ``expect()``), as the text of a stream author's own module: tests write it into a temporary
package and name it in a registry entry (``<module>:Tiny``), as a team would.

Rows: ``id`` and ``amount`` (``decimal(18,2)``) from a JSON value, with the Kafka coordinates; anything else a dead
letter (``malformed``). Used by tests/test_smallest_stream.py and tests/test_python_source_start.py.
"""

TRANSFORM = '''
from pyspark.sql import functions as F
from rewind.api import Transform, output_table


class Tiny(Transform):
    tables = (output_table("rows", key=("id",)),
              output_table("dead_letter", key=("topic", "partition", "offset")))

    def build(self, source, spec):
        text = F.col("value").cast("string")
        parsed = source.select(F.get_json_object(text, "$.id").alias("id"),
                               F.get_json_object(text, "$.amount").cast("decimal(18,2)").alias("amount"),
                               "topic", "partition", "offset")
        ok = F.col("id").isNotNull() & F.col("amount").isNotNull()
        return {"rows": parsed.filter(ok),
                "dead_letter": parsed.filter(~ok).select("topic", "partition", "offset",
                                                         F.lit("malformed").alias("reason"))}
'''
