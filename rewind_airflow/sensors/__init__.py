"""Sensors: the watch over a running stream."""
