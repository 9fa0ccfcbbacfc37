"""The YARN ResourceManager's REST API (``/ws/v1/cluster/...``): what a cluster manager says about an
application, and the one act Rewind asks of it (kill).

Why REST and not the ``yarn`` command: the Airflow side and the CLI need the answer without a Hadoop
installation (only the ResourceManager's web address, from the Spark connection's
``yarn_resourcemanager_webapp_address``, as the Spark provider reads it); the Hadoop RPC client would
bring Hadoop's jars. Standard library only (``urllib``), so ``rewind`` gains no dependency.

Rewind finds its applications by tag (``spark.yarn.tags``: ``rewind-stream-<name>``), not by the id
spark-submit prints: the id is then known to every host, also when the process that submitted is gone.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from rewind.errors import Failed

#: States of an application that has not ended (YarnApplicationState).
ACTIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
FINAL_STATES = ("FINISHED", "FAILED", "KILLED")


class ResourceManagerUnreachable(Failed, RuntimeError):
    """The ResourceManager did not answer (or answered an error); the message names its address."""


@dataclass(frozen=True)
class YarnApp:
    """One application as the ResourceManager reports it."""

    app_id: str
    name: str
    state: str                 # NEW .. RUNNING, FINISHED, FAILED, KILLED
    final_status: str          # UNDEFINED while it runs; SUCCEEDED, FAILED, KILLED at the end
    tracking_url: str | None   # the RM's proxy to the driver's UI while it runs, its history after
    diagnostics: str = ""
    tags: tuple[str, ...] = ()
    started_ms: int = 0
    finished_ms: int = 0
    am_host: str | None = None          # the node (NodeManager web address) running the ApplicationMaster
    am_container_logs: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @classmethod
    def from_rest(cls, raw: dict[str, Any]) -> "YarnApp":
        tags = tuple(t for t in str(raw.get("applicationTags") or "").split(",") if t)
        return cls(app_id=str(raw["id"]), name=str(raw.get("name", "")), state=str(raw.get("state", "")),
                   final_status=str(raw.get("finalStatus", "")), tracking_url=raw.get("trackingUrl") or None,
                   diagnostics=str(raw.get("diagnostics") or ""), tags=tags,
                   started_ms=int(raw.get("startedTime") or 0), finished_ms=int(raw.get("finishedTime") or 0),
                   am_host=raw.get("amHostHttpAddress") or None, am_container_logs=raw.get("amContainerLogs") or None)


@dataclass(frozen=True)
class YarnNode:
    node_id: str       # host:port of the NodeManager
    state: str         # RUNNING, UNHEALTHY, LOST, SHUTDOWN, DECOMMISSIONED...
    containers: int
    used_mb: int
    available_mb: int
    health: str = ""


@dataclass
class ResourceManagerClient:
    """``web_url``: ``http://HOST:PORT`` of the ResourceManager's web app (``yarn.resourcemanager.webapp.address``)."""

    web_url: str
    timeout_s: float = 5.0
    _opener: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.web_url = self.web_url.rstrip("/")
        if "://" not in self.web_url:
            self.web_url = f"http://{self.web_url}"

    def _call(self, path: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.web_url}{path}", data=data, method=method,
                                     headers={"Accept": "application/json", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise ResourceManagerUnreachable(f"YARN ResourceManager at {self.web_url} answered {method} {path} "
                                             f"with HTTP {exc.code}: {exc.read()[:300]!r}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ResourceManagerUnreachable(f"YARN ResourceManager at {self.web_url} does not answer ({exc}); check "
                                             "that it runs and yarn_resourcemanager_webapp_address") from exc
        return json.loads(raw) if raw else {}

    def cluster_info(self) -> dict[str, Any]:
        """``clusterInfo``: ``state`` is STARTED once the ResourceManager serves, ``haState`` ACTIVE."""
        return dict((self._call("/ws/v1/cluster/info") or {}).get("clusterInfo", {}))

    def nodes(self) -> list[YarnNode]:
        """Every NodeManager the ResourceManager knows, lost ones included."""
        raw = (self._call("/ws/v1/cluster/nodes?states=NEW,RUNNING,UNHEALTHY,LOST,SHUTDOWN,DECOMMISSIONED,"
                          "DECOMMISSIONING,REBOOTED") or {}).get("nodes") or {}
        return [YarnNode(str(n["id"]), str(n.get("state", "")), int(n.get("numContainers") or 0),
                         int(n.get("usedMemoryMB") or 0), int(n.get("availMemoryMB") or 0),
                         str(n.get("healthReport") or "")) for n in raw.get("node", [])]

    def running_nodes(self) -> list[YarnNode]:
        return [n for n in self.nodes() if n.state == "RUNNING"]

    def apps(self, tag: str | None = None, states: tuple[str, ...] = ()) -> list[YarnApp]:
        """Applications (newest first), filtered by one tag (YARN lower-cases tags) and states."""
        query: dict[str, str] = {}
        if tag:
            query["applicationTags"] = tag.lower()
        if states:
            query["states"] = ",".join(states)
        path = "/ws/v1/cluster/apps" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        raw = (self._call(path) or {}).get("apps") or {}
        apps = [YarnApp.from_rest(a) for a in raw.get("app", [])]
        return sorted(apps, key=lambda a: (a.started_ms, a.app_id), reverse=True)

    def app(self, app_id: str) -> YarnApp | None:
        raw = self._call(f"/ws/v1/cluster/apps/{urllib.parse.quote(app_id)}")
        return YarnApp.from_rest(raw["app"]) if raw and "app" in raw else None

    def kill(self, app_id: str) -> str:
        """Ask the ResourceManager to kill ``app_id`` (PUT ``{"state": "KILLED"}``); returns the state it
        answered (ACCEPTED while the kill is under way)."""
        raw = self._call(f"/ws/v1/cluster/apps/{urllib.parse.quote(app_id)}/state", "PUT", {"state": "KILLED"})
        return str((raw or {}).get("state", ""))


def still_running(apps: list[YarnApp], tag: str) -> list[str]:
    """Pure: the ids of ``apps`` that carry ``tag`` and have not ended (queued ones included)."""
    return [a.app_id for a in apps if tag.lower() in a.tags and a.active]


def stream_tag(stream: str) -> str:
    """The tag every YARN application of ``stream`` carries (``spark.yarn.tags``); YARN keeps tags in lower case."""
    return f"rewind-stream-{stream}".lower()
