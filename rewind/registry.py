"""The stream registry: one YAML file declares every stream Rewind runs.

Validation is strict (unknown keys are refused) because a typo in a recovery
setting must fail at load, naming the file and key, not at 3 a.m.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rewind.alerts import EVENTS as ALERT_EVENTS
from rewind.alerts import AlertEvent
from rewind.errors import Refused
from rewind.settings import default_registry, interpolate_env
from rewind.sink.delta_target import is_delta_url, parse_delta_sink
from rewind.sink.kafka_target import is_kafka_url, parse_kafka_sink

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


class RegistryError(Refused, ValueError):
    """A registry problem; the message names the file, the key and what is expected."""


def parse_duration(value: str | int | float) -> timedelta:
    """'30 seconds', '2s', '5 min', '1h', '7d' or a number of seconds."""
    if isinstance(value, (int, float)):
        return timedelta(seconds=float(value))
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(value).lower())
    units = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
             "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
             "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001}
    if not m or m.group(2) not in units:
        raise ValueError(f"not a duration: {value!r} (use e.g. '30 seconds', '5 min', '2h', '7d')")
    return timedelta(seconds=float(m.group(1)) * units[m.group(2)])


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


#: A duration in the registry ('30 seconds', '5 min', '2h', '7d'): kept as written, checked at load,
#: so a typo ('5 secnds') fails there, naming the file and the key, not at 3 a.m. in a restart.
Duration = Annotated[str, AfterValidator(_check_duration)]
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")


def _check_schedule(value: str | None) -> str | None:
    """A savepoint schedule is a preset (@hourly ...), a cron expression, or a duration between runs."""
    if value is None or value in SCHEDULE_PRESETS:
        return value
    from croniter import croniter

    if croniter.is_valid(value):
        return value
    try:
        parse_duration(value)
    except ValueError:
        raise ValueError(f"not a schedule: {value!r} (use a preset such as @hourly, a cron expression such as "
                         "'*/30 * * * *', a duration such as '30 min', or null for none)") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSpec(_Strict):
    """``kafka``: Spark's own connector (the default); ``rewind_kafka``: Rewind's Python Data Source,
    for Spark deployments that cannot add jars. Both take the same options (``kafka.*`` are the
    Kafka client's settings)."""

    format: Literal["rewind_kafka", "kafka"] = "kafka"
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        return {str(k): str(val) for k, val in v.items()} if isinstance(v, dict) else v


class SinkSpec(_Strict):
    """``url``: a SQL database (``sqlite:///...``, ``postgresql+psycopg2://...``), Kafka topics
    (``kafka://HOST:PORT[/TOPIC_PREFIX]``, see ``rewind.sink.kafka_target``) or Delta tables
    (``delta:///DIR``, see ``rewind.sink.delta_target``); ``options``: the Kafka sink's client and
    topic settings, the Delta sink's table properties (a SQL sink takes none)."""

    url: str
    table_prefix: str = ""
    options: dict[str, str] = Field(default_factory=dict)
    #: ``driver``: each batch is collected and written by the driver; ``executors`` (SQL and Delta
    #: sinks): the executors write the rows and the driver commits (``rewind.driver.staged_writer``,
    #: ``rewind.driver.delta_writer``).
    write_from: Literal["driver", "executors"] = "driver"

    @field_validator("options", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        return {str(k): str(val) for k, val in v.items()} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _exactly_once_possible(self) -> SinkSpec:

        if is_delta_url(self.url):
            parse_delta_sink(self.url, self.options)  # refuses an app id or version of its own, naming the option
        elif is_kafka_url(self.url):
            parse_kafka_sink(self.url, self.options)  # refuses what breaks transactions, naming the option
            if self.write_from == "executors":
                raise ValueError("write_from: executors is for SQL sinks: one Kafka transaction cannot span the "
                                 "executors' producers, so the Kafka sink writes from the driver; remove write_from")
        elif self.options:
            raise ValueError(f"options {sorted(self.options)} are for a kafka:// or delta:// sink; a SQL sink "
                             "takes its settings in its URL")
        return self

    @field_validator("table_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and not re.fullmatch(r"[a-z][a-z0-9_]{0,30}", v):
            raise ValueError("must be lowercase letters, digits and _ (it becomes part of SQL table names)")
        return v


class RestartSpec(_Strict):
    strategy: Literal["fixed-delay", "exponential-backoff", "failure-rate"] = "exponential-backoff"
    max_attempts: int = Field(5, ge=1)
    delay: Duration = "5 seconds"
    max_delay: Duration = "2 min"
    failure_rate_interval: Duration = "10 min"


class SavepointSpec(_Strict):
    schedule: Annotated[str | None, AfterValidator(_check_schedule)] = "@hourly"
    keep_last: int = Field(5, ge=1)
    max_age: Duration = "7d"
    deadline: Duration | None = None  # a run not finished this long after it was queued is late; default: the interval

    def airflow_schedule(self) -> Any:
        """What a DAG's ``schedule`` takes: the preset or cron text, or a timedelta for a duration."""
        s = self.schedule
        if s is None or s.startswith("@"):
            return s
        from croniter import croniter

        return s if croniter.is_valid(s) else parse_duration(s)


class AssetsSpec(_Strict):
    """The stream's tables as Airflow Assets (``rewind.assets``): at most one event per table per ``interval``."""

    interval: Duration = "1 minute"


class SupervisionSpec(_Strict):
    """When the supervisor calls a stream unhealthy (rewind.supervision.health.Thresholds), and how often it looks."""

    poll: Duration = "2 seconds"
    heartbeat_timeout: Duration = "60 seconds"  # no listener event at all: the driver is hung
    stall_after: Duration = "2 min"  # Kafka has data but no new batch for this long
    startup_grace: Duration = "3 min"  # a starting stream is left alone this long
    max_lag: int | None = Field(None, ge=1)  # records behind that raise an alarm (no restart)
    alert_every: Duration = "10 min"  # an alert that lasts (lag) is raised again after this long
    # Keep a warm standby driver beside the running one (rewind.driver.standby): a second Spark
    # driver's memory, for a takeover in seconds instead of a relaunch's start-up.
    standby: bool = False

    def thresholds(self) -> dict[str, Any]:
        """Keyword arguments of ``rewind.supervision.health.Thresholds`` (plain JSON: the trigger serializes them)."""
        return {"heartbeat_stale_s": parse_duration(self.heartbeat_timeout).total_seconds(),
                "stall_s": parse_duration(self.stall_after).total_seconds(),
                "startup_grace_s": parse_duration(self.startup_grace).total_seconds(), "max_lag": self.max_lag,
                "alert_every_s": parse_duration(self.alert_every).total_seconds()}


#: Short names for the notifiers of Airflow's providers (any other ``BaseNotifier`` by its class path).
NOTIFIER_ALIASES = {
    "smtp": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
    "slack": "airflow.providers.slack.notifications.slack.SlackNotifier",
    "pagerduty": "airflow.providers.pagerduty.notifications.pagerduty.PagerdutyNotifier",
}


class AlertsSpec(_Strict):
    """Who is told of what (``rewind.alerts``): the events, and an Airflow notifier to send them through.

    ``notifier``: ``class`` (a ``BaseNotifier`` class path, or ``smtp``, ``slack``, ``pagerduty``) and
    that class's keyword arguments (e.g. ``to``, ``from_email``, ``smtp_conn_id``); its message fields
    left unset are filled with the alert (stream, cause, details, a link to the Rewind page).
    Credentials stay in the Airflow connection the notifier names, never here."""

    on: list[AlertEvent] = Field(default_factory=lambda: list(ALERT_EVENTS))
    notifier: dict[str, Any]
    page_url: str | None = None  # the Rewind page in alerts; default: Airflow's [api] base_url + /rewind/

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, v: Any) -> Any:
        """YAML 1.1 (PyYAML) reads the key ``on`` as the boolean true: give it its name back."""
        return {("on" if k is True else k): val for k, val in v.items()} if isinstance(v, dict) else v

    @field_validator("notifier")
    @classmethod
    def _notifier(cls, v: dict[str, Any]) -> dict[str, Any]:
        path = v.get("class")
        if not isinstance(path, str) or not (path in NOTIFIER_ALIASES or re.fullmatch(r"[A-Za-z_][\w.]*\.\w+", path)):
            raise ValueError(f"notifier needs `class`: an Airflow notifier's class path (e.g. "
                             f"{NOTIFIER_ALIASES['smtp']}) or one of {sorted(NOTIFIER_ALIASES)}; got {path!r}")
        return v

    def notifier_class(self) -> str:
        path = str(self.notifier["class"])
        return NOTIFIER_ALIASES.get(path, path)

    def notifier_args(self) -> dict[str, Any]:
        return {k: v for k, v in self.notifier.items() if k != "class"}


#: Spark settings a stream's ``spark_conf`` may not change, and why (the message names what to do instead).
RESERVED_SPARK_CONF = {
    "spark.master": "the master comes from the Airflow Spark connection (--master) or REWIND_SPARK_MASTER",
    "spark.sql.streaming.checkpointLocation": "the registry's `checkpoint` key sets it",
    "spark.sql.streaming.stateStore.providerClass": "Rewind's checkpoint inspection, repair and savepoints read "
                                                    "the RocksDB state store's files",
}


def _check_spark_conf(conf: dict[str, str]) -> dict[str, str]:
    for key in conf:
        if not key.startswith("spark."):
            raise ValueError(f"{key!r} is not a Spark setting (Spark's settings start with 'spark.', e.g. "
                             "spark.sql.shuffle.partitions)")
        if key in RESERVED_SPARK_CONF:
            raise ValueError(f"{key} cannot be set per stream: {RESERVED_SPARK_CONF[key]}")
    return conf


class RealTimeTrigger(_Strict):
    """``trigger: {real_time: "5 seconds"}``: Spark's real-time mode (``rewind.driver.realtime``), epochs this long."""

    real_time: Duration


class StreamSpec(_Strict):
    name: str = ""
    topics: list[str] = Field(min_length=1)
    partitions: int = Field(3, ge=1)
    transform: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    source: SourceSpec = Field(default_factory=SourceSpec)
    sink: SinkSpec
    checkpoint: str
    status_dir: str
    #: Where the stream's control state lives (status, heartbeat, lease, failures, cursors:
    #: ``rewind.control``): ``s3://BUCKET/PREFIX`` or a directory. Default: beside the checkpoint
    #: (``<checkpoint>.control``), so every host that shares the checkpoint shares its lease.
    control: str | None = None
    #: How often the stream starts a micro-batch (Spark's processing-time trigger), or
    #: ``{real_time: "5 seconds"}`` for Spark's real-time mode (``RealTimeTrigger``; stateless plans only).
    trigger: Duration | RealTimeTrigger = "2 seconds"
    #: The length of the stream's tumbling windows, read by ``build`` (``spec.durations()["window"]``);
    #: an ``Aggregate`` without ``size`` takes it, and the proofs and replays place its groups' windows
    #: by it: keep it equal to the window ``build`` computes (docs/add-your-stream.md, "Durations").
    window: Duration = "10 seconds"
    #: The delay ``build`` gives ``withWatermark`` (``spec.durations()["watermark_delay"]``); the proofs
    #: and replays take a group as closed no later than the latest event time minus it.
    watermark_delay: Duration = "30 seconds"
    #: For ``build``'s own rules; Rewind does not read it (the demo dead-letters an event this far behind).
    allowed_lateness: Duration = "20 seconds"
    restart: RestartSpec = Field(default_factory=RestartSpec)
    savepoints: SavepointSpec = Field(default_factory=SavepointSpec)
    supervision: SupervisionSpec = Field(default_factory=SupervisionSpec)
    dq_suite: str = "exactly_once"
    assets: AssetsSpec = Field(default_factory=AssetsSpec)
    #: Alerts through an Airflow notifier (``AlertsSpec``); default: the registry's top-level ``alerts``.
    alerts: AlertsSpec | None = None
    #: Spark settings for this stream's driver, its standby and its replays, over Rewind's defaults
    #: (``rewind.driver.spark_session.build_session``). E.g. ``spark.sql.shuffle.partitions``: the
    #: state partitions of a NEW checkpoint (Rewind's default is 2, for 2 cores; Spark keeps a
    #: checkpoint's own number when it resumes, so changing it later changes nothing).
    spark_conf: Annotated[dict[str, str], AfterValidator(_check_spark_conf)] = Field(default_factory=dict)

    @field_validator("trigger", mode="before")
    @classmethod
    def _one_trigger(cls, v: Any) -> Any:
        """A duration, or ``{real_time: DURATION}``: one error naming which, not one per form."""
        if isinstance(v, dict):
            if set(v) != {"real_time"}:
                raise ValueError(f"a trigger is a duration ('2 seconds') or {{real_time: '5 seconds'}}, got keys "
                                 f"{sorted(v)}")
            return RealTimeTrigger(real_time=_check_duration(str(v["real_time"])))
        return _check_duration(v) if isinstance(v, str) else v

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _stringify_conf(cls, v: Any) -> Any:
        return {str(k): str(val).lower() if isinstance(val, bool) else str(val) for k, val in v.items()} \
            if isinstance(v, dict) else v

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str]) -> list[str]:
        for t in v:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t):
                raise ValueError(f"invalid Kafka topic name {t!r}")
        return v

    @property
    def real_time(self) -> timedelta | None:
        """The real-time mode's checkpoint interval, or None for a micro-batch stream."""
        return parse_duration(self.trigger.real_time) if isinstance(self.trigger, RealTimeTrigger) else None

    def durations(self) -> dict[str, timedelta]:
        """The entry's durations; ``trigger`` is the real-time mode's checkpoint interval for such a stream."""
        found = {k: parse_duration(getattr(self, k)) for k in ("window", "watermark_delay", "allowed_lateness")}
        return {"trigger": self.real_time or parse_duration(str(self.trigger)), **found}

    def config_hash(self) -> str:
        """Identifies the job configuration (stored in savepoint manifests). An empty ``spark_conf`` and an
        unset ``control`` are left out, so entries written before they existed keep their hash (a restore
        warns when it changed). Alerts, assets and deadlines are not the job's configuration: left out."""
        unset = {k: True for k in ("spark_conf", "control") if not getattr(self, k)}
        dump = self.model_dump_json(exclude={"alerts": True, "assets": True, "savepoints": {"deadline"}, **unset})
        return hashlib.sha256(dump.encode()).hexdigest()[:16]


class Registry(_Strict):
    streams: dict[str, StreamSpec]
    source_file: str = ""

    def get(self, name: str) -> StreamSpec:
        if name not in self.streams:
            known = ", ".join(sorted(self.streams)) or "(none)"
            raise RegistryError(f"stream {name!r} is not in the registry {self.source_file}; known streams: {known}")
        return self.streams[name]


#: What to give for a stream's required key, when it is missing (pydantic says only "Field required").
REQUIRED: dict[str, str] = {
    "topics": "the Kafka topics the stream reads, e.g. topics: [orders]",
    "transform": "the stream's Transform class as module:Class, e.g. transform: orders.transform:OrdersTransform",
    "sink": 'where its tables go, e.g. sink: {url: "sqlite:///${REWIND_HOME}/sink/orders.db"} (docs/sinks.md)',
    "checkpoint": "Spark's checkpoint directory or s3a:// URL, e.g. checkpoint: ${REWIND_HOME}/checkpoints/orders",
    "status_dir": "a local directory for its status, logs and reports, e.g. status_dir: ${REWIND_HOME}/status"}


def _format_errors(path: Path, prefix: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join([prefix, *[str(p) for p in err["loc"]]]) if prefix else ".".join(str(p) for p in err["loc"])
        msg = "unknown field (check the spelling)" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "missing" and len(err["loc"]) == 1 and str(err["loc"][0]) in REQUIRED:
            msg = f"required: {REQUIRED[str(err['loc'][0])]}"
        lines.append(f"{path}: {key}: {msg}")
    return "\n".join(lines)


def load_registry(path: str | Path | None = None, env: dict[str, str] | None = None) -> Registry:
    """Load and validate; ``${VAR:-default}`` is expanded from ``env`` (default: os.environ)."""

    path = Path(path) if path else default_registry()
    if not path.exists():
        raise RegistryError(f"registry file {path} not found (set REWIND_REGISTRY or pass --registry)")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("streams"), dict):
        raise RegistryError(f"{path}: expected a top-level mapping 'streams: {{name: {{...}}}}'")
    extra = set(raw) - {"streams", "alerts"}
    if extra:
        raise RegistryError(f"{path}: {', '.join(sorted(extra))}: unknown top-level key; expected 'streams' "
                            "and optionally 'alerts'")
    shared_alerts = raw.get("alerts")
    env = dict(os.environ if env is None else env)
    env.setdefault("REWIND_HOME", str(Path.cwd() / ".rewind"))
    streams: dict[str, StreamSpec] = {}
    for name, body in raw["streams"].items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise RegistryError(f"{path}: streams.{name}: stream names are lowercase letters, digits and _ "
                                "(they become DAG ids, table names and S3 keys)")
        if not isinstance(body, dict):
            raise RegistryError(f"{path}: streams.{name}: expected a mapping")
        try:
            if shared_alerts is not None and "alerts" not in body:  # the top-level block, for every stream
                body = {**body, "alerts": shared_alerts}
            streams[name] = StreamSpec(**{**interpolate_env(body, env), "name": name})
        except ValidationError as exc:
            raise RegistryError(_format_errors(path, f"streams.{name}", exc)) from None
        except Refused as exc:  # an environment variable the entry names is not set
            raise RegistryError(f"{path}: streams.{name}: {exc}") from None
    return Registry(streams=streams, source_file=str(path))
