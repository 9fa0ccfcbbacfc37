"""librdkafka's log lines, through Python logging, with repeats held back.

Why: librdkafka writes its own log lines straight to stderr, and a client that cannot reach a
broker logs one every time it retries. During a 6 s broker restart a stream's log got thousands
of lines like ``%3|...|FAIL|rdkafka#consumer-2| ... Connect to ipv4#127.0.0.1:46775 failed:
Connection refused``, one every 50 ms from every consumer, burying everything else. Every client
Rewind creates hands librdkafka the logger ``rewind.kafka.librdkafka`` instead (confluent-kafka's
``logger`` setting; the lines arrive when the client is polled), and that logger lets the first
line of a kind through, then at most one similar line per 30 s, which says how many it held back.

"Similar" means equal once numbers are blanked out (ports, client names like ``consumer-2``,
``after 0ms``) and librdkafka's own "N identical error(s) suppressed" is dropped, so one broker
going away is a handful of lines however many consumers notice.

Spark executors: the Python source pickles its consumer settings, logger included, to executors;
a ``logging.Logger`` pickles by name, and this module installs the filter on that name when it
is imported, which every module that creates a client does.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

LOGGER_NAME = "rewind.kafka.librdkafka"
WINDOW_S = 30.0

_NUMBERS = re.compile(r"\d+")
_LIBRDKAFKA_REPEATS = re.compile(r",? *\d+ identical error\(s\) suppressed")


def similar_key(record: logging.LogRecord) -> str:
    """What makes two log lines "the same line again": level and text without numbers."""
    text = _LIBRDKAFKA_REPEATS.sub("", record.getMessage())
    return f"{record.levelno}:{_NUMBERS.sub('#', text)}"


class SimilarLines(logging.Filter):
    """A logging filter: the first line of a kind passes, then at most one similar line per
    ``window_s``, carrying the count of the similar lines held back since the last one shown."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic,
                 max_kinds: int = 1000) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self.max_kinds = max_kinds
        self.held_back = 0                          # lines held back in all, for tests and curiosity
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (when last shown, held back since)
        self._lock = threading.Lock()               # clients are polled from several threads

    def filter(self, record: logging.LogRecord) -> bool:
        key = similar_key(record)
        now = self.clock()
        with self._lock:
            shown, held = self._kinds.get(key, (None, 0))
            if shown is not None and now - shown < self.window_s:
                self._kinds[key] = (shown, held + 1)
                self.held_back += 1
                return False
            if len(self._kinds) >= self.max_kinds:
                self._kinds = {k: v for k, v in self._kinds.items() if now - v[0] < self.window_s}
            self._kinds[key] = (now, 0)
        if held and shown is not None:  # held > 0 only for a kind already shown
            record.msg = (f"{record.getMessage()} ({held} similar line(s) held back in the last "
                          f"{now - shown:.0f} s)")
            record.args = None
        return True


def librdkafka_logger() -> logging.Logger:
    """The logger every Rewind Kafka client hands librdkafka (``"logger"`` in its settings), with
    ``SimilarLines`` installed once."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, SimilarLines) for f in logger.filters):
        logger.addFilter(SimilarLines())
    return logger


librdkafka_logger()  # on import: settings unpickled on an executor name the logger, not the filter
