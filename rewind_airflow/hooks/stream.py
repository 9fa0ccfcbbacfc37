"""Launch a registered stream's driver through spark-submit, on the Spark connection (``spark_default``).

Where the driver runs is the connection's to say, read as the Spark provider reads it:

- **on this worker** (local, standalone or YARN client mode): spark-submit is started detached
  (`RewindStreamHook.launch_detached`), in its own session, its output appended to the stream's log; the
  task returns and the stream reports through its status and heartbeat;
- **in a YARN container** (master ``yarn``, extra ``deploy-mode: cluster``): the Spark provider's public
  ``SparkSubmitHook.submit`` (`RewindStreamHook.submit_to_yarn`), which returns once YARN accepted the
  application (``spark.yarn.submit.waitAppCompletion=false``); the driver reports the same way.

Why the detached command is built here, from the connection, and not by the Spark provider: its public way
to run spark-submit, ``SparkSubmitHook.submit()``, starts it as a child of the task with its output piped
into the task's log, and waits until it exits. A driver in local or client mode is spark-submit's child and
a stream never ends, so ``submit()`` would hold the task (and its worker slot) for the stream's life, and
the driver would die with the task; the supervisor defers its watch and needs the driver to outlive the
task that launched it. The provider has no public method that returns the command instead of running it
(``_build_spark_submit_command`` and the connection it resolves are private, and its reading of the
connection changed between releases). So `SparkConnection` reads the connection (``get_connection``, the
hook's public surface) the way provider 6.3 does: the master from host (and port; a URI form's scheme),
``deploy-mode``, ``queue``, ``spark-binary``, ``namespace``, ``principal`` and ``keytab`` from the extra;
no connection means ``--master yarn``. ``tests/test_provider.py`` pins the commands and checks them
against what the installed provider's own ``submit`` runs for the same connection, so a provider release
that reads connections differently fails there. In cluster mode ``submit()`` returns by itself, so that
path goes through it unchanged.

The YARN submit's content (the job archive, the registry, the conf, no secret on the command line) is
decided by ``rewind.runtime.cluster_submit``; here it is handed to the provider, with S3's keys from the
``rewind_s3`` connection in a 0600 properties file that lives while spark-submit runs. The
ResourceManager's address is the connection's ``yarn_resourcemanager_webapp_address`` (the provider's own
key), else ``yarn.resourcemanager.webapp.address`` of ``$HADOOP_CONF_DIR/yarn-site.xml``.
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import (
    ALLOWED_SPARK_BINARIES,
    DEFAULT_SPARK_BINARY,
    SparkSubmitHook,
)
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

#: Rewind's knobs of a driver (``rewind.settings``) that follow it into its YARN container when set where it
#: is submitted, as they follow a driver launched on the worker itself (``REWIND_FAULTS``: tests only).
DRIVER_KNOBS = ("REWIND_LAG_PROBE_S", "REWIND_SPARK_LOG_LEVEL", "REWIND_DRIVER_WAIT_S", "REWIND_LEASE_TTL_S",
                "REWIND_FAULTS", "REWIND_LINEAGE_INTERVAL_S")
#: OpenLineage's client settings (``rewind.lineage``) that follow a driver into its YARN container; the API key
#: goes with S3's keys, in the properties file.
LINEAGE_KNOBS = ("OPENLINEAGE_URL", "OPENLINEAGE_ENDPOINT", "OPENLINEAGE_NAMESPACE", "OPENLINEAGE_DISABLED")

#: The worker's settings a driver in a YARN container must not get: Spark's YARN client appends the worker's
#: ``PYTHONPATH`` to the driver's, where its paths mean nothing; the driver's and executors' Python there is
#: the deployment's ``spark.pyspark.python``.
WORKER_ONLY = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def submit_env(*, driver_on_worker: bool = True, native: bool = True) -> dict[str, str]:
    """What Rewind sets in the environment of every spark-submit it runs, over the worker's own:

    - this interpreter's folder first on ``PATH``: its ``spark-submit`` (pyspark's, when the worker has it;
      else a Spark installation's on ``PATH``);
    - with the driver on this worker (local, standalone or YARN client mode): ``PYSPARK_PYTHON`` and
      ``PYSPARK_DRIVER_PYTHON`` this interpreter (it has pyarrow and Rewind), a checkout first on ``PYTHONPATH``;
    - with the driver on this worker, ``SPARK_SUBMIT_OPTS`` with the class-data archive (``class_sharing``)
      and (``native``) ``LD_LIBRARY_PATH`` with Spark's native libraries unpacked once (``native_libs``);
    - with the driver in a YARN container: nothing more; `WORKER_ONLY` is left out of the worker's.

    The replay task passes it as ``SparkSubmitHook(env_vars=...)``; the launches start spark-submit in the
    worker's environment with it on top (`_spark_submit_environ`).
    """
    from rewind.runtime.class_sharing import submit_env as class_sharing_env
    from rewind.runtime.native_libs import library_env as native_env
    from rewind.settings import python_path

    python = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable} if driver_on_worker else {}
    env = {**python, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if driver_on_worker:  # a checkout's code; the driver's JVM maps the class-data archive and the libraries' folder
        env.update({"PYTHONPATH": python_path()} if python_path() else {})
        env.update({**class_sharing_env(), **(native_env() if native else {})})
    return env


def _spark_submit_environ(*, driver_on_worker: bool = True) -> dict[str, str]:
    """spark-submit's whole environment: the worker's (without `WORKER_ONLY` for a driver in a YARN container)
    with `submit_env` on top."""
    kept = {k: v for k, v in os.environ.items() if driver_on_worker or k not in WORKER_ONLY}
    return {**kept, **submit_env(driver_on_worker=driver_on_worker)}


@dataclass(frozen=True)
class SparkConnection:
    """A Spark connection as spark-submit reads it (the Spark provider's reading of ``spark_default``).

    :param master: ``--master``; ``yarn`` when there is no connection (the provider's default)
    :param deploy_mode: ``--deploy-mode`` (extra ``deploy-mode``): ``client``, ``cluster`` or None
    :param queue: ``--queue`` (extra ``queue``), YARN only
    :param spark_binary: the command (extra ``spark-binary``): ``spark-submit``, ``spark2-submit`` or
        ``spark3-submit``, found on ``PATH``
    :param namespace: Kubernetes namespace (extra ``namespace``)
    :param principal: Kerberos principal (extra ``principal``)
    :param keytab: the keytab's content, base64 (extra ``keytab``); written to a file when a command needs it
    :param resourcemanager: the ResourceManager's web address (extra ``yarn_resourcemanager_webapp_address``)
    """

    master: str = "yarn"
    deploy_mode: str | None = None
    queue: str | None = None
    spark_binary: str = DEFAULT_SPARK_BINARY
    namespace: str | None = None
    principal: str | None = None
    keytab: str | None = None
    resourcemanager: str | None = None

    @classmethod
    def of(cls, conn: Any) -> SparkConnection:
        """Read an Airflow connection (``conn_type``, ``host``, ``port``, ``extra``) as provider 6.3 does: a
        ``spark`` connection whose host holds a URL (or has no port) has the master in its host; otherwise the
        master is ``<conn_type>://<host>``, the URI form's; the port is appended to either."""
        host = conn.host or ""
        master = host if conn.conn_type == "spark" and host and ("://" in host or not conn.port) \
            else f"{conn.conn_type}://{host}"
        extra = conn.extra_dejson or {}
        if extra.get("spark-home"):
            raise ValueError(f"Spark connection {conn.conn_id!r}: the `spark-home` extra is not allowed any more "
                             f"(as in the Spark provider): put one of {ALLOWED_SPARK_BINARIES} on PATH and set "
                             "`spark-binary` if needed")
        binary = extra.get("spark-binary", DEFAULT_SPARK_BINARY)
        if binary not in ALLOWED_SPARK_BINARIES:
            raise ValueError(f"Spark connection {conn.conn_id!r}: spark-binary {binary!r} is not one of "
                             f"{ALLOWED_SPARK_BINARIES} (as in the Spark provider)")
        return cls(f"{master}:{conn.port}" if conn.port else master, extra.get("deploy-mode"), extra.get("queue"),
                   binary, extra.get("namespace"), extra.get("principal"), extra.get("keytab"),
                   extra.get("yarn_resourcemanager_webapp_address"))

    @property
    def is_yarn_cluster(self) -> bool:
        """The driver runs in a YARN container (master ``yarn``, deploy mode ``cluster``)."""
        return "yarn" in self.master and self.deploy_mode == "cluster"

    def command(self, application: str, application_args: list[str], *, name: str, jars: str | None = None,
                driver_class_path: str | None = None, conf: dict[str, str] | None = None) -> list[str]:
        """spark-submit of ``application``: the options Rewind's launches use, in the order the provider writes
        them (``--master``, ``--conf``s, the Kubernetes namespace, ``--driver-class-path``, ``--jars``,
        ``--keytab``, ``--principal``, ``--name``, ``--queue``, ``--deploy-mode``), then the application and
        its arguments."""
        command = [self.spark_binary, "--master", self.master]
        for key, value in (conf or {}).items():
            command += ["--conf", f"{key}={value}"]
        if "k8s" in self.master and self.namespace:
            command += ["--conf", f"spark.kubernetes.namespace={self.namespace}"]
        if driver_class_path:
            command += ["--driver-class-path", driver_class_path]
        if jars:
            command += ["--jars", jars]
        if self.keytab:
            command += ["--keytab", keytab_file(self.keytab, self.principal)]
        if self.principal:
            command += ["--principal", self.principal]
        command += ["--name", name]
        if self.queue:
            command += ["--queue", self.queue]
        if self.deploy_mode:
            command += ["--deploy-mode", self.deploy_mode]
        return [*command, application, *application_args]


def keytab_file(base64_keytab: str, principal: str | None) -> str:
    """The keytab written where the Spark provider writes it (``<tmp>/airflow_keytab-<principal>``; kept when
    it already holds the same bytes), readable by this user only."""
    content = base64.b64decode(base64_keytab)
    path = Path(tempfile.gettempdir()).resolve() / f"airflow_keytab-{principal or os.urandom(8).hex()}"
    if path.exists() and path.read_bytes() == content:
        return str(path)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(staging, path)
    return str(path)


class RewindStreamHook(BaseHook):
    """Launch a registry stream's driver (or warm standby) through spark-submit, where the Spark connection
    says: detached on this worker (`launch_detached`), or into YARN in cluster mode (`submit_to_yarn`).

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``, read by the driver)
    :param bootstrap: Kafka, as the driver reaches it (default: the driver's own resolution)
    :param conn_id: the Spark connection (type ``spark``, the Spark provider's)
    :param standby: launch a warm standby (``--standby``) instead of the driver
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Rewind stream launch"

    def __init__(self, stream: str, registry: str | None = None, bootstrap: str | None = None,
                 conn_id: str = default_conn_name, standby: bool = False) -> None:
        super().__init__()
        self.stream, self.registry, self.bootstrap = stream, registry, bootstrap
        self.conn_id, self.standby = conn_id, standby
        self._connection: SparkConnection | None = None

    def get_conn(self) -> SparkConnection:
        """The Spark connection as spark-submit reads it (``yarn`` with nothing else when there is none)."""
        if self._connection is None:
            try:
                conn = self.get_connection(self.conn_id)
            except AirflowException:  # not found: the Spark provider's default is YARN client mode
                self.log.info("no Spark connection %r: spark-submit --master yarn", self.conn_id)
                self._connection = SparkConnection()
            else:
                self._connection = SparkConnection.of(conn)
        return self._connection

    def is_yarn_cluster(self) -> bool:
        """The connection submits to YARN in cluster mode: the driver runs in a container, not on this worker."""
        return self.get_conn().is_yarn_cluster

    def resourcemanager_url(self) -> str | None:
        """The ResourceManager's web address: the connection's ``yarn_resourcemanager_webapp_address``, else
        ``yarn.resourcemanager.webapp.address`` of ``$HADOOP_CONF_DIR/yarn-site.xml``; None when neither says."""
        raw = self.get_conn().resourcemanager
        if raw:
            return raw if "://" in raw else f"http://{raw}"
        from rewind.embedded.yarn_config import webapp_address_of

        found = webapp_address_of(os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR"))
        return f"http://{found}" if found else None

    def application_args(self) -> list[str]:
        """The stream job's arguments (``spark_jobs/stream.py``)."""
        return [self.stream] + (["--registry", self.registry] if self.registry else []) + \
            (["--bootstrap", self.bootstrap] if self.bootstrap else []) + (["--standby"] if self.standby else [])

    def submit_command(self) -> list[str]:
        """The spark-submit command of a driver on this worker: the connection's settings, Spark's Kafka
        connector and Rewind's classes with ``--jars`` and, for an ``s3a://`` checkpoint, the S3A jars with
        ``--driver-class-path`` (under spark-submit the JVM's class path is fixed before the session's conf is
        read), inside a task its OpenLineage parent (``rewind_airflow.lineage``), the stream job and its
        arguments."""
        from rewind_airflow.lineage import parent_spark_conf
        from spark_jobs import STREAM_JOB

        command = self.get_conn().command(str(STREAM_JOB), self.application_args(), name=f"rewind-{self.stream}",
                                          jars=stream_jars(self.stream, self.registry),
                                          driver_class_path=s3a_driver_class_path(self.stream, self.registry),
                                          conf=parent_spark_conf())
        self.log.info("spark-submit command: %s", " ".join(command))
        return command

    def launch_detached(self, log_path: Path, env: dict[str, str] | None = None) -> int:
        """Start `submit_command` in its own session (it outlives the task), its output appended to
        ``log_path``, in the worker's environment with `submit_env` and ``env`` on top; spark-submit's pid."""
        from rewind.supervision.process_control import spawn_detached

        pid = spawn_detached(self.submit_command(), log_path, {**_spark_submit_environ(), **(env or {})})
        self.log.info("launched %s detached: pid %d, log %s", self.stream, pid, log_path)
        return pid

    def _container_env(self) -> tuple[dict[str, str], dict[str, str]]:
        """What a driver in a YARN container is given: (its environment, the secrets of it: S3's keys, for the
        properties file)."""
        from rewind import faults
        from rewind.settings import jars_dir
        from rewind_airflow.hooks.s3 import RewindS3Hook

        s3 = RewindS3Hook().config()
        driver_env = {"REWIND_JARS": str(jars_dir()), "REWIND_S3_BUCKET": s3.bucket, "AWS_REGION": s3.region,
                      **({"AWS_ENDPOINT_URL": s3.endpoint, "REWIND_S3_ENDPOINT": s3.endpoint} if s3.endpoint else {}),
                      **{k: os.environ[k] for k in (*DRIVER_KNOBS, *LINEAGE_KNOBS) if os.environ.get(k)}}
        if driver_env.get(faults.ENV):  # YARN's launch script keeps no double quote of an environment value
            driver_env[faults.ENV] = faults.encoded(driver_env[faults.ENV])
        secret_env = {"AWS_ACCESS_KEY_ID": s3.access_key or "", "AWS_SECRET_ACCESS_KEY": s3.secret_key or "",
                      "OPENLINEAGE_API_KEY": os.environ.get("OPENLINEAGE_API_KEY", "")}
        return driver_env, {k: v for k, v in secret_env.items() if v}

    def _submit_yarn(self, application: Path, submit: Any, registry: str) -> None:
        """Hand one cluster-mode submit (``rewind.runtime.cluster_submit``) to ``SparkSubmitHook.submit``, S3's
        keys in a 0600 properties file that lives while spark-submit runs."""
        from rewind.runtime.cluster_submit import write_properties
        from rewind_airflow.lineage import parent_spark_conf

        with tempfile.TemporaryDirectory(prefix="rewind-submit-") as private:  # mode 0700
            props = write_properties(Path(private) / "spark.properties", submit.secret_conf,
                                     os.environ.get("SPARK_CONF_DIR"))
            hook = SparkSubmitHook(conf={**submit.conf, **parent_spark_conf()}, conn_id=self.conn_id,
                                   files=submit.files, archives=submit.archives,
                                   jars=stream_jars(self.stream, registry),
                                   driver_class_path=s3a_driver_class_path(self.stream, registry),
                                   properties_file=str(props), name=submit.name,
                                   application_args=submit.application_args)
            hook.submit(str(application), env=_spark_submit_environ(driver_on_worker=False))

    def submit_to_yarn(self) -> dict[str, Any]:
        """spark-submit the driver (or standby) into YARN through ``SparkSubmitHook.submit``, which returns once
        YARN accepted the application: ``{"tag", "submitted_at", "resourcemanager"}``."""
        from rewind.registry import load_registry
        from rewind.runtime.cluster_submit import job_archive, stream_submit
        from rewind.settings import default_registry, rewind_home
        from spark_jobs import STREAM_JOB

        if not self.bootstrap:
            raise ValueError(f"{self.stream}: a driver in a YARN container is told where Kafka is (bootstrap)")
        registry = str(self.registry or default_registry())
        spec = load_registry(registry).get(self.stream)
        archive = job_archive(spec.transform, rewind_home() / "ship")
        driver_env, secret_env = self._container_env()
        submit = stream_submit(self.stream, Path(registry).resolve(), self.bootstrap, archive,
                               standby=self.standby, driver_env=driver_env, secret_env=secret_env)
        started = time.time()
        self._submit_yarn(STREAM_JOB, submit, registry)
        return {"tag": submit.conf["spark.yarn.tags"].split(",")[-1], "submitted_at": started,
                "resourcemanager": self.resourcemanager_url()}

    def submit_job_to_yarn(self, job: Path, args: list[str], files: list[Path], name: str,
                           transforms: Sequence[str] = (), deadline_s: float | None = None) -> list[str]:
        """spark-submit one of Rewind's bounded jobs for this stream into YARN (cluster mode) and wait for its
        end; ``files`` go with it, named in ``args`` by their base names (``cluster_submit.job_submit``); the
        code of the stream's transform goes with it, and of ``transforms`` too (a pre-flight's new version).

        ``deadline_s``: past it, the job's applications still queued or running are killed through the
        ResourceManager (spark-submit then ends): a job YARN never schedules must not hold the task forever.
        Returns the ids of the applications killed so (empty: it ended by itself)."""
        from rewind.registry import load_registry
        from rewind.runtime.cluster_submit import job_archive, job_submit, job_tag
        from rewind.runtime.yarn_rm import ResourceManagerClient, still_running
        from rewind.settings import default_registry, rewind_home

        registry = str(self.registry or default_registry())
        code = [load_registry(registry).get(self.stream).transform, *transforms]
        archive = job_archive(code, rewind_home() / "ship")
        driver_env, secret_env = self._container_env()
        killed: list[str] = []
        rm = self.resourcemanager_url() if deadline_s else None

        def past_deadline() -> None:
            client = ResourceManagerClient(str(rm))
            for app_id in still_running(client.apps(tag=job_tag(self.stream)), job_tag(self.stream)):
                self.log.warning("%s: past its %.0fs deadline: killing YARN application %s", name, deadline_s, app_id)
                client.kill(app_id)
                killed.append(app_id)

        watchdog = threading.Timer(float(deadline_s or 0), past_deadline) if rm else None
        if watchdog is not None:
            watchdog.daemon = True
            watchdog.start()
        try:
            self._submit_yarn(job, job_submit(self.stream, name, args, archive, files, driver_env=driver_env,
                                              secret_env=secret_env), registry)
        finally:
            if watchdog is not None:
                watchdog.cancel()
        return killed


def _spec_here(stream: str, registry: str | None) -> Any:
    """The stream's registry entry, or None when the registry cannot be read here (the stream job then reports
    that itself)."""
    from rewind.errors import Refused
    from rewind.registry import load_registry

    try:
        return load_registry(registry).get(stream)
    except (Refused, OSError):
        return None


def s3a_driver_class_path(stream: str, registry: str | None) -> str | None:
    """The S3A jars as a class path when the stream's checkpoint is ``s3a://``, else None."""
    from rewind.runtime.jars import s3a_jars
    from rewind.runtime.s3a import is_s3a

    spec = _spec_here(stream, registry)
    return ":".join(s3a_jars()) if spec is not None and is_s3a(spec.checkpoint) else None


def stream_jars(stream: str, registry: str | None) -> str:
    """``--jars`` of the stream's driver: ``submit_jars``, with delta-spark's only where its sink needs them and the
    JDBC drivers only for a real-time stream (or one whose entry this worker cannot read)."""
    from rewind.runtime.jvm import submit_jars
    from rewind.sink.delta_target import needs_delta_spark

    spec = _spec_here(stream, registry)
    return ",".join(submit_jars(delta=spec is not None and needs_delta_spark(spec.sink.url, spec.sink.write_from),
                                jdbc=spec is None or spec.real_time is not None))
