"""Launch a registered stream in YARN's cluster deploy mode, through the Spark provider's public API.

The Airflow worker runs spark-submit (``SparkSubmitHook.submit``: the connection gives ``--master yarn`` and
``--deploy-mode cluster``; ``HADOOP_CONF_DIR`` in the worker's environment gives the ResourceManager) and
returns once YARN accepted the application; the driver runs in a YARN container, not on the worker, and
reports through the stream's status and heartbeat. What the submit carries (the job archive, the registry,
the conf, no secret on the command line) is decided by ``rewind.runtime.cluster_submit``; here it is only
handed to the provider, with S3's keys from the ``rewind_s3`` connection written to a 0600 properties file
that lives while spark-submit runs.

Whether a connection means cluster mode, and where its ResourceManager's REST API is, are read from the
connection as the provider reads them: host ``yarn`` and extra ``deploy-mode: cluster``;
``yarn_resourcemanager_webapp_address`` (the provider's own key), else the ``HADOOP_CONF_DIR``'s
``yarn-site.xml``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook


def connection_is_yarn_cluster(conn_id: str = "spark_default") -> bool:
    """The Spark connection submits to YARN in cluster mode (host ``yarn``, extra ``deploy-mode: cluster``)."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - no connection: the provider's default is YARN client mode
        return False
    return "yarn" in (conn.host or "") and (conn.extra_dejson or {}).get("deploy-mode") == "cluster"


def resourcemanager_url(conn_id: str = "spark_default") -> str | None:
    """The ResourceManager's web address: the connection's ``yarn_resourcemanager_webapp_address``, else
    ``yarn.resourcemanager.webapp.address`` of ``$HADOOP_CONF_DIR/yarn-site.xml``; None when neither says."""
    try:
        raw = (BaseHook.get_connection(conn_id).extra_dejson or {}).get("yarn_resourcemanager_webapp_address")
    except Exception:  # noqa: BLE001
        raw = None
    if raw:
        return str(raw) if "://" in str(raw) else f"http://{raw}"
    from rewind.embedded.yarn_config import webapp_address_of

    found = webapp_address_of(os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR"))
    return f"http://{found}" if found else None


#: Rewind's knobs of a driver (``rewind.settings``) that follow it into its container when set where it is
#: submitted, as they follow a driver launched on the worker itself (``REWIND_FAULTS``: tests only).
DRIVER_KNOBS = ("REWIND_LAG_PROBE_S", "REWIND_SPARK_LOG_LEVEL", "REWIND_DRIVER_WAIT_S", "REWIND_LEASE_TTL_S",
                "REWIND_FAULTS")


class RewindClusterHook:
    """``RewindClusterHook("demo", registry).launch()``: spark-submit the stream's driver into YARN.

    :param stream: the registry stream
    :param registry: the registry file (shipped to the driver with ``--files``)
    :param bootstrap: Kafka, as the driver reaches it
    :param conn_id: the Spark connection (master ``yarn``, deploy mode ``cluster``)
    :param standby: submit a warm standby instead of the driver
    """

    def __init__(self, stream: str, registry: str, bootstrap: str, conn_id: str = "spark_default",
                 standby: bool = False) -> None:
        self.stream, self.registry, self.bootstrap = stream, registry, bootstrap
        self.conn_id, self.standby = conn_id, standby

    def launch(self) -> dict[str, Any]:
        """Submit and return once YARN accepted the application: ``{"tag", "submitted_at", "resourcemanager"}``."""
        from rewind import faults
        from rewind.registry import load_registry
        from rewind.runtime.cluster_submit import job_archive, stream_submit, write_properties
        from rewind.runtime.jvm import submit_jars
        from rewind.settings import jars_dir, rewind_home
        from rewind_airflow.hooks.s3 import RewindS3Hook
        from rewind_airflow.hooks.stream import s3a_driver_class_path
        from spark_jobs import STREAM_JOB

        spec = load_registry(self.registry).get(self.stream)
        archive = job_archive(spec.transform, rewind_home() / "ship")
        s3 = RewindS3Hook().config()
        driver_env = {"REWIND_JARS": str(jars_dir()), "REWIND_S3_BUCKET": s3.bucket, "AWS_REGION": s3.region,
                      **({"AWS_ENDPOINT_URL": s3.endpoint, "REWIND_S3_ENDPOINT": s3.endpoint} if s3.endpoint else {}),
                      **{k: os.environ[k] for k in DRIVER_KNOBS if os.environ.get(k)}}
        if driver_env.get(faults.ENV):  # YARN's launch script keeps no double quote of an environment value
            driver_env[faults.ENV] = faults.encoded(driver_env[faults.ENV])
        secret_env = {"AWS_ACCESS_KEY_ID": s3.access_key or "", "AWS_SECRET_ACCESS_KEY": s3.secret_key or ""}
        submit = stream_submit(self.stream, Path(self.registry).resolve(), self.bootstrap, archive,
                               standby=self.standby, driver_env=driver_env,
                               secret_env={k: v for k, v in secret_env.items() if v})
        started = time.time()
        with tempfile.TemporaryDirectory(prefix="rewind-submit-") as private:  # mode 0700
            props = write_properties(Path(private) / "spark.properties", submit.secret_conf,
                                     os.environ.get("SPARK_CONF_DIR"))
            hook = SparkSubmitHook(conf=submit.conf, conn_id=self.conn_id, files=submit.files,
                                   archives=submit.archives, jars=",".join(submit_jars()),
                                   driver_class_path=s3a_driver_class_path(self.stream, self.registry),
                                   properties_file=str(props), name=submit.name,
                                   application_args=submit.application_args)
            hook.submit(str(STREAM_JOB), env=submit_env())
        return {"tag": submit.conf["spark.yarn.tags"].split(",")[-1], "submitted_at": started,
                "resourcemanager": resourcemanager_url(self.conn_id)}


def submit_env() -> dict[str, str]:
    """spark-submit's environment: the worker's, with this interpreter's ``spark-submit`` on PATH (pyspark's,
    when the worker has it; else a Spark installation's on PATH) and without the worker's ``PYTHONPATH``
    (Spark's YARN client would append it to the driver's, where its paths mean nothing). The driver's and
    executors' Python is the deployment's ``spark.pyspark.python``, not the worker's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env

