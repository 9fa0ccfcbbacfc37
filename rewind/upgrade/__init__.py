"""Changing a running stream: upgrades of its registry entry (modes, a pre-flight check, a rollback)
and their history. Entry points: ``rewind.upgrade.run.upgrade`` and ``rewind stream upgrade``."""
