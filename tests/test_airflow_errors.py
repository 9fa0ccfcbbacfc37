"""In Airflow, a refusal fails the task without retries; a failure is left to Airflow's retries."""

from __future__ import annotations

import pytest

from rewind.errors import Failed, Refused


def test_refusal_fails_without_retry_and_failure_is_retried() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from rewind.supervision.failures import CrashLoop
    from rewind_airflow.errors import fail_without_retry_on_refusal

    for refused in (Refused("bad range: from after to"), CrashLoop("crash loop: 6 failures at batch 4")):
        with pytest.raises(AirflowFailException, match=str(refused)[:20]):
            with fail_without_retry_on_refusal():
                raise refused
    with pytest.raises(Failed):  # Airflow retries it as configured
        with fail_without_retry_on_refusal():
            raise Failed("Kafka did not answer")
    with pytest.raises(KeyError):  # not Rewind's: untouched
        with fail_without_retry_on_refusal():
            raise KeyError("x")
