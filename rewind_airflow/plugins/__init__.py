"""The Rewind page in Airflow's UI."""
