"""The Rewind page for an Airflow that takes its plugins from a folder (MWAA, Composer, a Helm chart's
``plugins/``): copy this folder's files into that Airflow's plugins folder, and install Rewind from a wheel
in its requirements (``rewind[airflow] @ .../rewind-X-py3-none-any.whl``).

The page is ``rewind_airflow.plugins.rewind.RewindPlugin``, the same class the package's ``airflow.plugins``
entry point registers for ``pip install`` deployments. Airflow loads this folder first and then the entry
points, and reports a plugin registered twice as an import error, so this file hands Airflow the class only
when no installed distribution registers it: a wheel installed with its entry points gets the page from
them, one shipped without (a ``plugins.zip`` of sources, a ``PYTHONPATH``) gets it from here; either way
once. Operators are not plugins in Airflow 3: the DAGs import them from ``rewind_airflow``.
"""

from __future__ import annotations

from importlib.metadata import entry_points

PAGE = "rewind_airflow.plugins.rewind:RewindPlugin"


def registered_by_an_entry_point() -> bool:
    return any(ep.value == PAGE for ep in entry_points(group="airflow.plugins"))


if not registered_by_an_entry_point():
    from rewind_airflow.plugins.rewind import RewindPlugin

    __all__ = ["RewindPlugin"]  # Airflow registers the AirflowPlugin subclasses a plugins-folder module holds
