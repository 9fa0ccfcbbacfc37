"""A stream's output tables as Airflow Assets: committed ranges announced once each (``docs/assets.md``)."""
