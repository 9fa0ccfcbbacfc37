"""The spark-submit applications: thin files that wire their arguments to ``rewind`` (which decides).

spark-submit runs a Python application from a file, so these are files (``STREAM_JOB``, ``REPLAY_JOB``,
``PREFLIGHT_JOB``).
On a cluster manager that runs the driver inside the cluster (YARN's cluster deploy mode) spark-submit
ships the file to the cluster, with the ``rewind`` package beside it (``--py-files``): nothing else of the
Airflow side goes. A top-level folder of the repository, as the design card lays it out, and a package of
the distribution too (``pip install rewind`` installs it), so an installed Rewind's hooks find the files.
"""

from pathlib import Path

STREAM_JOB = Path(__file__).resolve().parent / "stream.py"
REPLAY_JOB = Path(__file__).resolve().parent / "replay.py"
PREFLIGHT_JOB = Path(__file__).resolve().parent / "preflight.py"
