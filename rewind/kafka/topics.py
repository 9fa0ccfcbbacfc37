"""Create a topic when it is missing (producers and tools that set up their own topics).

Why here and not in a producer: every stream's producer needs it, and a stream's package must not
import another stream's (the inventory stream never imports the demo's).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1, timeout_s: float = 15.0,
                 config: dict[str, str] | None = None, topic_config: dict[str, str] | None = None) -> int:
    """Create ``topic`` with ``partitions`` if it does not exist; return its partition count (an
    existing topic is used as it is, with a warning when its count differs). ``config``: more
    librdkafka settings (security); ``topic_config``: the new topic's own settings (cleanup.policy...)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**(config or {}), "bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=timeout_s)
    if topic in meta.topics and not meta.topics[topic].error:
        have = len(meta.topics[topic].partitions)
        if have != partitions:
            log.warning("topic %s exists with %d partitions (asked for %d); using it as is", topic, have, partitions)
        return have
    new = NewTopic(topic, partitions, replication, config=dict(topic_config or {}))
    for fut in admin.create_topics([new]).values():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:  # created meanwhile by another process: fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    return partitions
