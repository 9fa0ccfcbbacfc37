"""The settings of every Kafka client Rewind creates: the base consumer settings, and a stream's
``kafka.*`` options, as the Java client takes them, turned into librdkafka settings.

Why one place: every tool that reads a stream's topics with confluent-kafka (``verify``, the DQ
proof, the lag probe, the replay planner, the ``rewind_kafka`` source) must reach the same brokers
with the same credentials, read the same way (assign only: no group membership, no commits,
end-of-partition events on) and log the same way (``client_logs``: librdkafka's lines through
Python logging, repeats held back).

Why a translation: a stream's source options are written for Spark's own connector, so their
``kafka.*`` part is Java client configuration (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``...), and librdkafka names some of those settings differently or not at
all: the JAAS line becomes ``sasl.username`` / ``sasl.password``, JKS stores have no librdkafka
equivalent. Pure: no I/O; hand-written because no library maps the two (they are different clients).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rewind.kafka.client_logs import librdkafka_logger
from rewind.kafka.types import KafkaClientConfigError

#: Java client settings with another name in librdkafka.
_RENAMED = {
    "sasl.mechanism": "sasl.mechanisms",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
    "sasl.kerberos.service.name": "sasl.kerberos.service.name",
}
#: Java-only settings that have no meaning for librdkafka and change nothing about what is read.
_JAVA_ONLY = {
    "key.deserializer", "value.deserializer", "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.truststore.type", "ssl.keystore.type", "interceptor.classes", "metric.reporters",
    "default.api.timeout.ms", "request.timeout.ms", "retry.backoff.max.ms", "connections.max.idle.ms",
    "max.poll.records", "max.poll.interval.ms", "fetch.max.wait.ms", "fetch.min.bytes", "receive.buffer.bytes",
    "send.buffer.bytes", "metadata.max.age.ms", "reconnect.backoff.max.ms", "allow.auto.create.topics",
}
_JAAS_LOGIN = re.compile(r"^\s*(org\.apache\.kafka\.common\.security\.(plain\.PlainLoginModule|"
                         r"scram\.ScramLoginModule))\s+required\s*(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas(text: str) -> dict[str, str]:
    """username/password of a PLAIN or SCRAM ``sasl.jaas.config`` line."""
    m = _JAAS_LOGIN.match(text)
    if not m:
        raise KafkaClientConfigError(
            "option 'kafka.sasl.jaas.config': only PlainLoginModule and ScramLoginModule lines can be used by "
            "Rewind's own Kafka clients; for other mechanisms set the librdkafka settings directly "
            "(e.g. kafka.sasl.oauthbearer.config)")
    opts = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(m.group(3))}
    if "username" not in opts or "password" not in opts:
        raise KafkaClientConfigError("option 'kafka.sasl.jaas.config' must give username=\"...\" and password=\"...\"")
    return {"sasl.username": opts["username"], "sasl.password": opts["password"]}


def librdkafka_config(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings for ``options`` (keys without the ``kafka.`` prefix, Java or librdkafka names).

    Settings both clients share pass unchanged; renamed ones are renamed; a JAAS line becomes
    username and password; Java-only settings that do not change what is read are dropped; a
    JKS store is refused with the librdkafka setting to use instead.
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        if key in _JAVA_ONLY:
            continue
        if key == "sasl.jaas.config":
            out.update(parse_jaas(value))
        elif key in ("ssl.truststore.location", "ssl.keystore.location"):
            if str(value).lower().endswith((".jks", ".p12", ".pfx")) and key == "ssl.truststore.location":
                raise KafkaClientConfigError(
                    f"option 'kafka.{key}': librdkafka (used by verify, the DQ proof and the lag probe) cannot read a "
                    "Java trust store; also set 'kafka.ssl.ca.location' to the CA certificate in PEM form")
            if key == "ssl.keystore.location":
                out["ssl.keystore.location"] = value  # librdkafka reads PKCS#12 key stores
        elif key in ("ssl.truststore.password",):
            continue
        else:
            out[_RENAMED.get(key, key)] = value
    return out


def kafka_options(source_options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` part of a source's options, without the prefix and without the bootstrap."""
    return {k[len("kafka."):]: str(v) for k, v in source_options.items()
            if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"}


def base_consumer_config(bootstrap_servers: str, extra: Mapping[str, Any] | None = None, *,
                         group_id: str = "rewind-kafka-source",
                         auto_offset_reset: str = "error") -> dict[str, Any]:
    """Consumer settings for assign-only reading: no group membership, no commits, EOF events on.

    ``extra`` (the user's ``kafka.*`` options, Java or librdkafka names, see ``librdkafka_config``)
    wins over the defaults, except for the settings the readers rely on.
    """
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "fetch.wait.max.ms": 100,         # an empty fetch at the end answers quickly (EOF latency)
        "allow.auto.create.topics": False,
        "topic.metadata.refresh.interval.ms": 60_000,
        "log_level": 3,
    }
    conf.update(librdkafka_config({str(k): str(v) for k, v in (extra or {}).items()}))
    conf.update({
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": auto_offset_reset,
        "logger": librdkafka_logger(),
    })
    return conf


def stream_consumer_config(source_options: Mapping[str, str], bootstrap_servers: str,
                           group_id: str) -> dict[str, Any]:
    """Consumer settings for a tool that reads a stream's topics (verify, proof, lag, replay plan):
    the stream's own ``kafka.*`` source options (security, isolation level), so the tool reaches
    the same brokers with the same credentials and counts what the stream itself reads."""
    return base_consumer_config(bootstrap_servers, kafka_options(source_options), group_id=group_id)
