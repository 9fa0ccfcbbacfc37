"""The one door from the proofs to a stream's record classifier.

Why a module of one function: the proofs judge every Kafka record with the classifier the stream
itself uses (a valid event, or a dead letter and why), so that the sink is held to exactly what
the stream was asked to do. Today that is the demo stream's classifier, so the proofs work for the
demo stream only. This is the only file of ``rewind.proof`` that imports demo code: issue 15
(proofs for any stream, through the transform contract) changes this file and nothing else here.
"""

from __future__ import annotations

from datetime import timedelta

from rewind.demo.events import Verdict
from rewind.demo.events import classify as _demo_classify


def classify(value: bytes | None, timestamp_ms: int | None, allowed_lateness: timedelta) -> Verdict:
    """The stream's verdict on one Kafka record: ``.event`` (None: a dead letter) and ``.reason``."""
    return _demo_classify(value, timestamp_ms, allowed_lateness)
