"""The supervisor's launch when the Spark connection is YARN in cluster mode: submit, then wait for the driver
YARN started to report running (``rewind.supervision.cluster_control.wait_running_on_yarn``).

Nothing stays on the Airflow worker: spark-submit returns once YARN accepted the application, and the task
follows the application through the ResourceManager's REST API and the driver through its status. A driver
that cannot start fails the task with YARN's diagnostics and where the driver's logs are.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the Spark provider loads when a launch runs, not when a DAG file is parsed
    from rewind_airflow.hooks.stream import RewindStreamHook


def launch_on_yarn(hook: RewindStreamHook, wait_s: float) -> dict[str, Any]:
    """spark-submit the hook's driver (or, with its ``standby``, a warm standby) into YARN; for a driver, wait
    until it reports running."""
    from rewind.control.status_store import read_stream_status
    from rewind.errors import Refused
    from rewind.registry import load_registry
    from rewind.runtime.yarn_rm import ResourceManagerClient
    from rewind.settings import default_registry
    from rewind.supervision.cluster_control import wait_running_on_yarn, where

    spec = load_registry(hook.registry or default_registry()).get(hook.stream)
    submitted = hook.submit_to_yarn()
    if not submitted["resourcemanager"]:
        raise Refused(f"Spark connection {hook.conn_id!r} submits to YARN, but nothing says where its "
                      "ResourceManager's web address is: set yarn_resourcemanager_webapp_address in the connection's "
                      "extra (or HADOOP_CONF_DIR with a yarn-site.xml)")
    if hook.standby:
        return {"standby_launched": True, "standby_tag": submitted["tag"]}
    client = ResourceManagerClient(submitted["resourcemanager"])
    st, app = wait_running_on_yarn(spec, client, submitted["submitted_at"], wait_s,
                                   lambda: read_stream_status(spec))
    return {"pid": st.pid, "app_id": app.app_id, "tracking_url": app.tracking_url, "node": app.am_host,
            "launched_at": submitted["submitted_at"], "running_at": time.time(), "log": where(app)}
