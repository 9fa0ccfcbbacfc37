"""A notifier as a provider writes one, that records what it would send: the alert tests' inbox.

Its own module (not a test module) because it subclasses Airflow's ``BaseNotifier``: importing it
imports Airflow, which a test module must not do at collection (test_dags needs Airflow imported
after its settings; tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseNotifier

SENT: list[dict[str, Any]] = []


class RecordingNotifier(BaseNotifier):  # type: ignore[misc]
    """Template fields rendered by BaseNotifier, then ``notify()`` records the message in ``SENT``."""

    template_fields = ("subject", "text", "channel")

    def __init__(self, channel: str, subject: str | None = None, text: str | None = None) -> None:
        super().__init__()
        self.channel, self.subject, self.text = channel, subject, text

    def notify(self, context: Any) -> None:
        SENT.append({"channel": self.channel, "subject": self.subject, "text": self.text})
