"""Whether lineage is on (a transport configured the client's own way), and the no-op ``Lineage`` when it is not.

Why a check of our own before the client: ``OpenLineageClient()`` with nothing configured falls back to
printing every event on the console, and the driver would import the client, build events and run a thread
for nothing. Lineage is on exactly when the client would find a transport (``OPENLINEAGE_URL``, an
``OPENLINEAGE__TRANSPORT__*`` variable, ``OPENLINEAGE_CONFIG`` or an ``openlineage.yml`` in the working
directory or ``~/.openlineage/`` that has a ``transport``) and ``OPENLINEAGE_DISABLED`` is not true, which is
also the rule of Airflow's OpenLineage provider. Off, a driver or replay gets ``Lineage()``: every call
returns at once, and ``openlineage`` is never imported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Lineage", "configured", "outcome"]

log = logging.getLogger(__name__)


def _has_transport(path: Path) -> bool:
    try:
        import yaml

        doc = yaml.safe_load(path.read_text())
    except (OSError, ValueError, ImportError) as exc:  # a broken file: the client would not use it either
        log.warning("OpenLineage config %s unreadable (%s): lineage off", path, exc)
        return False
    return isinstance(doc, dict) and isinstance(doc.get("transport"), dict) and bool(doc["transport"].get("type"))


def configured(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> bool:
    """Would ``OpenLineageClient()`` find a transport here (and is OpenLineage not disabled)?"""
    env = os.environ if env is None else env
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() in ("true", "1", "t"):
        return False
    if env.get("OPENLINEAGE_URL") or any(k.startswith("OPENLINEAGE__TRANSPORT") and v for k, v in env.items()):
        return True
    files = [Path(env["OPENLINEAGE_CONFIG"])] if env.get("OPENLINEAGE_CONFIG") else []
    files += [(cwd or Path.cwd()) / "openlineage.yml", Path.home() / ".openlineage" / "openlineage.yml"]
    return any(f.is_file() and _has_transport(f) for f in files)


def outcome(code: int, fenced: str | None, error: str | None) -> tuple[str, str | None]:
    """How a driver's end reads as a final event: fenced (another driver took the stream over) is ABORT,
    exit 0 is COMPLETE, anything else FAIL with the error (or the exit code)."""
    if fenced:
        return "ABORT", fenced
    if code == 0 and not error:
        return "COMPLETE", None
    return "FAIL", error or f"the driver ended with exit code {code}"


class Lineage:
    """A job's lineage as its code calls it; this one, with no transport, does nothing (``runs`` emits)."""

    run_id: str | None = None

    def outputs(self, tables: Iterable[Any]) -> None:
        """The sink's tables, resolved (their columns: the output datasets' schema)."""

    def rows(self, batch_id: int, counts: Mapping[str, int]) -> None:
        """A batch's rows written, per spec table (from the batch writer, on Spark's stream thread)."""

    def read(self, per_topic: Mapping[str, int]) -> None:
        """Rows read per topic (a replay's whole range)."""

    def progress(self, progress: Any) -> None:
        """A batch's ``StreamingQueryProgress`` (from the query listener)."""

    def start(self) -> None:
        """The job started (the query is running)."""

    def finish(self, state: str, error: BaseException | str | None = None) -> None:
        """The job ended: ``COMPLETE``, ``FAIL`` or ``ABORT``; waits a few seconds for the events to leave."""

    def end(self, code: int, fenced: str | None = None, error: BaseException | str | None = None) -> None:
        """``finish`` as ``outcome`` reads a driver's end (an exception's stack goes with a FAIL)."""
        text = None if error is None else (str(error) or type(error).__name__)[:20_000]  # a Java trace can be long
        state, message = outcome(code, fenced, text)
        self.finish(state, error if state == "FAIL" and isinstance(error, BaseException) else message)
