"""Triggers: waits that run in the triggerer, holding no worker slot."""
