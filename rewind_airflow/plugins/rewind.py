"""The Rewind plugin: the operator page (a FastAPI app at /rewind) and its entry in Airflow's navigation.

Registered through the ``airflow.plugins`` entry point of the installed package (pyproject.toml),
so ``pip install rewind[airflow]`` is all an Airflow needs; no file goes into its plugins folder.
Airflow loads plugins in the API server and in every task process; the app
(``rewind_airflow.plugins.ui_app``) is built on its first request, so task processes never import
the API server's modules for it.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/rewind"


class RewindApp:
    """An ASGI app that builds ``rewind_airflow.plugins.ui_app.create_app()`` when the first request arrives."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    def app(self) -> Any:
        with self._lock:
            if self._app is None:
                from rewind_airflow.plugins.ui_app import create_app

                self._app = create_app()
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app()(scope, receive, send)


class RewindPlugin(AirflowPlugin):
    name = "rewind"
    fastapi_apps = [{"app": RewindApp(), "url_prefix": URL_PREFIX, "name": "Rewind"}]
    # In the nav: opens /plugin/rewind, which frames the page served at /rewind/ (same origin, so the
    # UI's login cookie authenticates the page and its API calls).
    external_views = [{"name": "Rewind", "href": URL_PREFIX + "/", "url_route": "rewind", "destination": "nav",
                       "nav_top_level": True}]
