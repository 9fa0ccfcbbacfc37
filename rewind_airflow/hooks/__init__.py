"""Hooks own the connections: Kafka (``rewind_kafka``), savepoint storage (``rewind_s3``), spark-submit."""
