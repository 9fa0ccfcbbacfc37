"""spark-submit entry points: thin scripts that hand their arguments to the ``rewind`` command line.

spark-submit runs a Python application from a file, so these are files (``STREAM_JOB``,
``REPLAY_JOB``), inside the package so that an installed Rewind has them too.
"""

from pathlib import Path

STREAM_JOB = Path(__file__).resolve().parent / "stream.py"
REPLAY_JOB = Path(__file__).resolve().parent / "replay.py"
