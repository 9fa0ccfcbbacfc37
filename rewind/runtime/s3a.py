"""Spark on ``s3a://``: the conf a session needs to keep a stream checkpoint in S3 (SeaweedFS or AWS).

Why a module: a checkpoint in S3 is written by the driver (offset and commit logs) *and* by the
executors (state store files), so the S3A jars must be on both classpaths and the endpoint and
credentials must reach the executors through the Hadoop configuration, not the driver's
environment (an executor inherits its worker's environment, not the driver's).

- Jars: ``.jars/s3a`` (``make jars``) on ``spark.driver.extraClassPath`` and
  ``spark.executor.extraClassPath``, not ``spark.jars``: the AWS SDK bundle is 650 MB, which
  ``spark.jars`` would copy to every executor through the driver. The paths must exist on every
  host (true for the local cluster and an image that bakes ``.jars`` in). Under ``spark-submit``
  the driver's JVM is already running, so the driver's classpath must come with
  ``--driver-class-path`` instead.
- Endpoint, region, path-style access (SeaweedFS and MinIO need it), TLS off for ``http://``.
- Credentials: read as ``rewind.storage`` reads them (``AWS_*`` variables; the command line puts the
  embedded platform's there when it starts) and set on the running session's Hadoop configuration
  (``apply_credentials``), so they never appear on a command line (``ps``) or in ``--conf``;
  with none, S3A's default chain (environment, instance profile) applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewind.runtime.jars import s3a_jars
from rewind.storage import resolve_s3_config
from rewind.storage.s3_config import S3_SCHEMES

S3A = "s3a://"


def is_s3a(location: str) -> bool:
    return str(location).startswith(S3A)


def is_url(location: str) -> bool:
    """A location Spark reads through a Hadoop file system other than the local one (no ``mkdir``)."""
    return "://" in str(location) and not str(location).startswith("file://")


def s3a_conf(location: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark conf for a session whose checkpoint is ``location``; ``{}`` unless it is ``s3a://``.
    No secrets in it: see ``apply_credentials``."""
    if not is_s3a(location):
        if str(location).startswith(S3_SCHEMES):  # s3:// is boto3's scheme; Hadoop has no such file system
            raise ValueError(f"checkpoint {location}: Spark writes checkpoints through Hadoop's S3A, write it as "
                             f"s3a://{str(location).split('://', 1)[1]}")
        return {}

    cfg = resolve_s3_config(env=env, require_bucket=False)
    classpath = ":".join(s3a_jars())
    conf = {"spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": cfg.region,
            # fail in seconds, not minutes, when S3 is down (S3A's defaults retry for a long time)
            "spark.hadoop.fs.s3a.attempts.maximum": "3",
            "spark.hadoop.fs.s3a.retry.limit": "3",
            "spark.hadoop.fs.s3a.connection.establish.timeout": "15s"}  # S3A's minimum
    if cfg.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = cfg.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(cfg.endpoint.startswith("https://")).lower()
    return conf


def apply_credentials(spark: Any, location: str, env: Mapping[str, str] | None = None) -> None:
    """Put the S3 credentials on the session's Hadoop configuration (read by the driver and, serialized
    with every state store task, by the executors); nothing when ``location`` is not ``s3a://``."""
    if not is_s3a(location):
        return

    cfg = resolve_s3_config(env=env, require_bucket=False)
    if cfg.access_key and cfg.secret_key:
        hconf = spark.sparkContext._jsc.hadoopConfiguration()
        hconf.set("fs.s3a.access.key", cfg.access_key)
        hconf.set("fs.s3a.secret.key", cfg.secret_key)
        hconf.set("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
