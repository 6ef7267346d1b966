"""Airflow plugin: a "TFJob" tab on every DAG run, and its JSON at /tfjob/runs/{dag}/{run}.

Airflow's pages show tasks; a training run's story (its pods, the ClusterSpec
they got, how each replica ended, where the model and logs went) sits in the
XComs of eight tasks. The tab puts it on one page (runview/run.py).
A navigation entry "TFJob tenants" shows, per tenant the user may see, its
active runs, quota use, job slots and nodes (runview/tenants.py).

Every Airflow process loads plugins (task processes too, for macros), so the
FastAPI app is built only when the API server asks for it, and once: the plugin
listing (`/api/v2/plugins`) asks again on every call. Airflow 3.3 takes an app,
not a factory (`fastapi_apps` entries are mounted as they are): runview/api.py
imports FastAPI and Airflow's API server only when `build_app` runs.
"""

from functools import cached_property
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from runview.api import build_app

URL_PREFIX = "/tfjob"


class TfjobPlugin(AirflowPlugin):
    name = "tfjob"
    external_views = [
        {
            "name": "TFJob",
            "href": URL_PREFIX.lstrip("/") + "/runs/{DAG_ID}/{RUN_ID}/view",
            "destination": "dag_run",
            "url_route": "tfjob-run",
        },
        {
            "name": "TFJob tenants",
            "href": URL_PREFIX.lstrip("/") + "/tenants/view",
            "destination": "nav",
            "url_route": "tfjob-tenants",
        },
    ]

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:
        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "TF-on-K8s job view"}]
