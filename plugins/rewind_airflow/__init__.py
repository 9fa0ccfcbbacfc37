"""Airflow side of Rewind: hooks, triggers and operators split by role (like a provider package).

Everything here wires Airflow to functions of the ``rewind`` package, which decides.
"""
