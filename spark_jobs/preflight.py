"""spark-submit entry point of an upgrade's pre-flight (thin: ``rewind.upgrade.preflight_job.job_main`` decides).

usage: preflight.py STREAM --registry FILE --entry-file FILE --bootstrap HOST:PORT --scratch DIR --outcome FILE
                    [--bucket B]
Exit codes: 0 passed, 3 refused (the outcome file says why), 1 broke.
"""

import sys

from rewind.upgrade.preflight_job import job_main

if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
