"""Where a driver runs when a cluster manager runs it: the YARN application, written into the stream's status.

Why the driver says it: in YARN's cluster mode the driver is in a container of some node, started by an
application whose id only YARN and the driver know; the supervisor, the Rewind page and ``rewind supervisor
status`` read the status, and from it ask the ResourceManager about the application (is it still there?),
kill it when it hangs, and link to its tracking UI (the ResourceManager's proxy to the driver's Spark UI, which
follows the application wherever YARN put it).
"""

from __future__ import annotations

from typing import Any


def cluster_of(spark: Any) -> dict[str, str]:
    """``{"manager": "yarn", "app_id", "tracking_url", "resourcemanager"}`` for a session YARN runs, else {}."""
    sc = spark.sparkContext
    if not str(sc.master).startswith("yarn"):
        return {}
    app_id = str(sc.applicationId)
    web = sc._jsc.hadoopConfiguration().get("yarn.resourcemanager.webapp.address")  # from HADOOP_CONF_DIR
    rm = f"http://{web}" if web else ""
    return {"manager": "yarn", "app_id": app_id, "resourcemanager": rm,
            "tracking_url": f"{rm}/proxy/{app_id}/" if rm else ""}
