"""The demo stream: JSON events keyed by account, deduplicated and windowed."""
