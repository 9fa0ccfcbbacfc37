"""The DAG factory (generated from the stream registry)."""
