"""What every Rewind task about one stream shares: the stream's name (templated) and the registry it is read from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator


def registry_file(given: str | None) -> str:
    """The registry a task reads: the operator's ``registry``, else ``$REWIND_REGISTRY`` (the DAG files' own)."""
    from rewind.settings import default_registry

    return given or str(default_registry())


class StreamOperator(BaseOperator):
    """A task about one registry stream; subclasses implement ``execute``.

    :param stream: the registry stream
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    """

    template_fields: Sequence[str] = ("stream",)

    def __init__(self, *, stream: str, registry: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.registry = stream, registry

    @property
    def registry_file(self) -> str:
        return registry_file(self.registry)
