"""Triggering runs over Airflow's REST API and reading back their task-instance timings.

Shared by the whole-run (3) and concurrency (5) measurements, which both go
through a real Airflow (scheduler, LocalExecutor workers, triggerer) as a
user's `tshell submit` does: to the submit DAG of the world's tenant.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.pipeline_fixtures import TENANT
from tfjob.pipeline_ids import submit_dag_id

SUBMIT_DAG_ID = submit_dag_id(TENANT)
FINISHED = ("success", "failed")
PAGE_LIMIT = 100  # Airflow's default [api] maximum_page_limit


# What a real network needs: a connection refused or reset (the API server restarting a
# worker), or a proxy's 502/503/504, is asked again after these waits. A 500 is not: it
# was SQLite's "database is locked" workaround; on PostgreSQL a 500 is a bug to see.
RETRY_WAITS_S = (1.0, 2.0, 4.0, 8.0)
RETRIED_STATUSES = (502, 503, 504)
REQUEST_TIMEOUT_S = 60


@dataclass
class AirflowClient:
    """REST calls with one token, fetched again only when refused (a token per call would add a
    login request to every sample and load the machine being measured).

    Every 5xx answer it receives is counted in `server_errors` (status → count), the retried
    ones too: the measurements report the count (goal 0) and fail when it is not 0.
    """

    url: str
    username: str
    password: str
    token: str | None = None
    server_errors: Counter[int] = field(default_factory=Counter)

    def login(self) -> str:
        body = {"username": self.username, "password": self.password}
        self.token = self.send("POST", "/auth/token", body, None)["access_token"]
        return self.token

    def request(self, method: str, path: str, body: Any = None) -> Any:
        for attempt in (1, 2):
            token = self.token or self.login()
            try:
                return self.send(method, path, body, token)
            except urllib.error.HTTPError as error:
                if error.code in (401, 403) and attempt == 1:
                    self.token = None
                    continue
                raise
        raise AssertionError("unreachable")

    def send(self, method: str, path: str, body: Any, token: str | None) -> Any:
        """One call, asked again only on a connection error or a 502/503/504.

        A POST whose connection broke after it was sent may have been carried out (a trigger
        would then make two runs): it is asked again only when the connection was refused.
        """
        for wait in (*RETRY_WAITS_S, None):
            try:
                return self.send_once(method, path, body, token)
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUSES or wait is None:
                    raise
            except (urllib.error.URLError, ConnectionError) as error:
                reason = getattr(error, "reason", error)
                unsent = isinstance(reason, ConnectionRefusedError)
                if wait is None or not (method == "GET" or unsent):
                    raise
                print(f"airflow: {method} {path}: {reason!r}; asking again", flush=True)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def send_once(self, method: str, path: str, body: Any, token: str | None) -> Any:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                self.server_errors[error.code] += 1
                detail = error.read()[:300].decode(errors="replace")
                print(f"airflow: {method} {path}: {error.code} {detail}", flush=True)
            raise
        return json.loads(payload) if payload else None


def parse_time(text: str | None) -> float | None:
    """An Airflow/Kubernetes timestamp (ISO 8601, any precision, Z or offset) as epoch seconds."""
    if not text:
        return None
    text = text.strip().replace("Z", "+00:00")
    if "." in text:  # Python wants at most 6 fraction digits
        head, _, rest = text.partition(".")
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def trigger_run(
    airflow: Any, conf: dict[str, Any], dag_id: str = SUBMIT_DAG_ID
) -> tuple[str, float]:
    """(run_id, epoch seconds just before the trigger request)."""
    sent = time.time()
    answer = airflow.request(
        "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
    )
    return answer["dag_run_id"], sent


def read_run(airflow: Any, run_id: str, dag_id: str = SUBMIT_DAG_ID) -> dict[str, Any]:
    return airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")


def await_run(
    airflow: Any, run_id: str, timeout: float, dag_id: str = SUBMIT_DAG_ID
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = read_run(airflow, run_id, dag_id)
        if run["state"] in FINISHED:
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} of {dag_id} still {run['state']} after {timeout}s")
        time.sleep(0.5)


def read_pages(airflow: Any, path: str, key: str) -> list[dict[str, Any]]:
    """Every item of a paged REST listing (`key` in each answer), page after page.

    Airflow cuts any `limit` above its `[api] maximum_page_limit` (100) without saying so:
    one request with limit=1000 read only the first 100 task instances of a 100-job batch.
    """
    items: list[dict[str, Any]] = []
    while True:
        sep = "&" if "?" in path else "?"
        answer = airflow.request("GET", f"{path}{sep}limit={PAGE_LIMIT}&offset={len(items)}")
        page = answer[key]
        items += page
        if not page or len(items) >= answer["total_entries"]:
            return items


def read_task_instances(
    airflow: Any, run_id: str = "~", dag_id: str = SUBMIT_DAG_ID
) -> list[dict[str, Any]]:
    return read_pages(
        airflow, f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", "task_instances"
    )


def read_dag_runs(airflow: Any, dag_id: str = SUBMIT_DAG_ID) -> list[dict[str, Any]]:
    return read_pages(airflow, f"/api/v2/dags/{dag_id}/dagRuns", "dag_runs")


def task_spans(instances: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """task_id → {queued, start, end} as epoch seconds."""
    return {
        ti["task_id"]: {
            "queued": parse_time(ti.get("queued_when")),
            "start": parse_time(ti.get("start_date")),
            "end": parse_time(ti.get("end_date")),
        }
        for ti in instances
    }
