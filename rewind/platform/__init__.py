"""The embedded platform: child processes, the JVM dependencies, Apache Kafka, SeaweedFS."""
