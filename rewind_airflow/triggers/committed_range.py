"""The Asset watcher's trigger: each committed range of a stream's table handed to Airflow once.

Airflow's event-driven scheduling (``AssetWatcher``) runs this trigger in the triggerer; every
``TriggerEvent`` it yields becomes an Asset event of the watched Asset, whose ``extra["payload"]`` is
the range (``rewind.assets.ranges``). The decisions, the cursor and its claim live in ``rewind.assets``;
this class only loops, and reads its own events back from Airflow's REST API (the connection
``api_conn_id``) so that a claim left by a restarted triggerer is settled, not announced again.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

API_CONN_ID = "rewind_airflow_api"


def api_url(conn: Any) -> str:
    """The REST API's base URL from an Airflow connection (``http://host:port``; a host with its scheme kept)."""
    host = str(conn.host or "").rstrip("/")
    if "://" not in host:
        host = f"{conn.schema or 'http'}://{host}" if conn.schema in ("http", "https") else f"http://{host}"
    return f"{host}:{conn.port}" if conn.port and host.count(":") < 2 else host


class CommittedRangeTrigger(BaseEventTrigger):
    """Yields one event per committed range of ``stream``'s ``table`` (at most one per the registry's
    ``assets.interval``), and one per replay that rewrote it.

    :param stream: the registry stream
    :param table: the stream's table (its logical name, as the transform declares it)
    :param registry: the registry file (default: ``$REWIND_REGISTRY``)
    :param poll_s: seconds between looks at the cursor and the sink's ledger
    :param api_conn_id: an Airflow connection to this Airflow's REST API (URL, a user and password that
        may read Asset events)
    """

    def __init__(self, stream: str, table: str, registry: str | None = None, poll_s: float = 5.0,
                 api_conn_id: str = API_CONN_ID) -> None:
        super().__init__()
        self.stream, self.table, self.registry, self.poll_s, self.api_conn_id = (stream, table, registry, poll_s,
                                                                                   api_conn_id)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"stream": self.stream, "table": self.table, "registry": self.registry, "poll_s": self.poll_s,
                 "api_conn_id": self.api_conn_id})

    async def _client(self) -> Any:
        from airflow.sdk import BaseHook

        from rewind.runtime.airflow_client import AirflowClient

        try:
            conn = await BaseHook.aget_connection(self.api_conn_id)
        except Exception as exc:  # noqa: BLE001 - any lookup failure has one fix
            raise RuntimeError(
                f"the Asset watcher of {self.stream}.{self.table} needs the Airflow connection {self.api_conn_id!r} "
                f"({type(exc).__name__}: {exc}): this Airflow's REST API URL, a user and its password (e.g. "
                f"AIRFLOW_CONN_{self.api_conn_id.upper()}='http://USER:PASSWORD@HOST:8080'); the watcher reads "
                "its own events back so that a restart never announces a range twice") from None
        return AirflowClient(api_url(conn), conn.login or "", conn.password or "")

    def found(self, client: Any) -> Any:
        """``rewind.assets.watch.Lookup`` over the REST API: None when Airflow cannot be asked."""

        def lookup(name: str, event_id: str, since: float) -> bool | None:
            try:
                events = client.asset_events(name, since - 120.0)
            except Exception as exc:  # noqa: BLE001 - cannot tell: the claim waits, nothing is sent twice
                self.log.warning("cannot read %s's events back from Airflow (%s); waiting", name, exc)
                return None
            return any(((e.get("extra") or {}).get("payload") or {}).get("event_id") == event_id for e in events)

        return lookup

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from rewind.assets.watch import step

        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        client = await self._client()
        lookup = self.found(client)
        try:
            while True:
                try:
                    done = await asyncio.to_thread(step, self.stream, self.table, self.registry, owner, lookup)
                except Exception as exc:  # noqa: BLE001 - a sink or store briefly away: look again
                    self.log.warning("%s.%s: %s: %s; looking again in %ss", self.stream, self.table,
                                     type(exc).__name__, exc, self.poll_s)
                    await asyncio.sleep(self.poll_s)
                    continue
                if done.note:
                    self.log.info("%s.%s: %s", self.stream, self.table, done.note)
                if done.payload is not None:
                    yield TriggerEvent(done.payload)
                await asyncio.sleep(self.poll_s)
        finally:
            client.close()
