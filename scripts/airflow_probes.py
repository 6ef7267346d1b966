"""What scripts ask a running Airflow over HTTP: its health, a token, the DAG files it parsed.

scripts/airflow_server.py's `up` returns once `/api/v2/monitor/health` reports every
component healthy and the DAG processor has reported every DAG file of the dags folder
(as a DAG or an import error); these are those probes, with no state of their own.
Standard library only: they run before, and outside of, Airflow's own environment.
"""

from __future__ import annotations

import enum
import json
import urllib.request
from pathlib import Path


class ComponentHealth(enum.StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


def fetch_health(url: str, timeout: float = 2.0) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def is_healthy(health: dict | None) -> bool:
    if not health:
        return False
    components = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all(
        (health.get(name) or {}).get("status") == ComponentHealth.HEALTHY for name in components
    )


def fetch_token(url: str, username: str, password: str, timeout: float = 60.0) -> str:
    body = json.dumps({"username": username, "password": password}).encode()
    request = urllib.request.Request(
        f"{url}/auth/token", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())["access_token"]


def get_json(url: str, token: str, timeout: float = 60.0) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def list_dag_files(dags_folder: Path) -> set[str]:
    """Files the DAG processor parses (Airflow's safe mode: they mention 'airflow' and 'dag')."""
    if not dags_folder.is_dir():
        return set()
    found = set()
    for path in dags_folder.rglob("*.py"):
        if any(part.startswith((".", "__")) for part in path.relative_to(dags_folder).parts):
            continue
        text = path.read_bytes().lower()
        if b"airflow" in text and b"dag" in text:
            found.add(str(path.resolve()))
    return found


def list_parsed_files(url: str, token: str) -> set[str]:
    """Files that produced a DAG or an import error, as the API reports them."""
    parsed: set[str] = set()
    offset = 0
    while True:
        page = get_json(f"{url}/api/v2/dags?limit=100&offset={offset}", token)
        parsed.update(str(Path(dag["fileloc"]).resolve()) for dag in page["dags"])
        offset += len(page["dags"])
        if not page["dags"] or offset >= page["total_entries"]:
            break
    errors = get_json(f"{url}/api/v2/importErrors?limit=1000", token)
    parsed.update(str(Path(err["filename"]).resolve()) for err in errors["import_errors"])
    return parsed
