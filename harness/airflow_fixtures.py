"""A real Airflow (API server, scheduler, DAG processor, triggerer) for tests, started once.

Why this exists: Airflow takes 10–40 s to start on two cores, so tests share
one instance instead of each starting their own. It runs with this repo's
airflow.cfg (parallelism 16, LocalExecutor, the FAB auth manager; the
launcher migrates the database and creates the tenants' roles and users) on
a free port, with a home under pytest's temp dir, a database of its own in
the test process's PostgreSQL (harness/postgres_fixtures.py), and with the AIRFLOW_CONN_*
and other variables the caller passes. It is stopped, every
process of it, when the session ends.

`AirflowHandle.request` asks a call that is safe to repeat again only when no
answer comes (connection refused or reset, a timeout) or the answer is
502/503/504; with the metadata in PostgreSQL a 500 is a real failure of the
code under test and fails the test at once.

Use from a test module:

    from harness.airflow_fixtures import start_airflow

    @pytest.fixture(scope="session")
    def airflow(tmp_path_factory):
        handle = start_airflow(tmp_path_factory.mktemp("airflow"), extra_env={...})
        yield handle
        handle.stop()

or take `repo_airflow` (this repo's dags and plugins, no connections) by name: this
module is a pytest plugin (tests/conftest.py registers it).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.postgres_fixtures import airflow_database_url
from harness.repo_root import REPO_ROOT

# How long a retried call keeps asking an API server that gives no answer or 502/503/504.
UNAVAILABLE_PATIENCE_S = 90
# What a network or proxy answers when the server cannot answer now; 500 is not among them.
UNAVAILABLE_STATUSES = (502, 503, 504)


def _load_airflow_server() -> Any:
    # scripts/ is not a package; load the launcher the Make targets use, so tests run the same code.
    name = "tfjob_scripts_airflow_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / "airflow_server.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


airflow_server = _load_airflow_server()


@dataclass
class AirflowHandle:
    """A running Airflow: URL, admin login, a bearer token, and stop()."""

    url: str
    username: str
    password: str
    home: Path
    pid: int
    env: Mapping[str, str] = field(default_factory=dict)

    _token: str | None = field(default=None, repr=False)

    def token(self) -> str:
        """A bearer token, fetched once (valid 24 h): logging in on every call adds load."""
        if self._token is None:
            self._token = airflow_server.fetch_token(self.url, self.username, self.password)
        return self._token

    def request(self, method: str, path: str, body: Any = None, retry: bool | None = None) -> Any:
        """One authenticated REST call; returns the decoded JSON answer.

        A call that is safe to repeat (GET, PATCH, or `retry=True`) is asked again while
        no answer comes (connection errors, timeouts) or the answer is 502/503/504, for up
        to UNAVAILABLE_PATIENCE_S; a 4xx or a 500 is final.
        """
        retry = method in ("GET", "PATCH") if retry is None else retry
        deadline = time.monotonic() + UNAVAILABLE_PATIENCE_S
        while True:
            try:
                return self._request_once(method, path, body)
            except urllib.error.HTTPError as error:
                unavailable = error.code in UNAVAILABLE_STATUSES
                if not retry or not unavailable or time.monotonic() > deadline:
                    raise
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                if not retry or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)

    def _request_once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=90) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def for_user(self, username: str) -> AirflowHandle:
        """The same Airflow, logged in as `username` (the admin or a tenant's `<role>-user`)."""
        passwords = airflow_server.read_users(self.home)
        if username not in passwords:
            raise KeyError(
                f"no user {username!r} in {self.home / airflow_server.USERS_FILE}; "
                f"users: {', '.join(sorted(passwords))}"
            )
        return AirflowHandle(
            url=self.url,
            username=username,
            password=passwords[username],
            home=self.home,
            pid=self.pid,
            env=self.env,
        )

    def stop(self) -> list[int]:
        return airflow_server.stop_airflow(self.home)


def start_airflow(
    home: Path,
    port: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    dags_folder: Path = REPO_ROOT / "dags",
    plugins_folder: Path = REPO_ROOT / "plugins",
) -> AirflowHandle:
    """Start Airflow and return once it is healthy and has parsed `dags_folder`."""
    settings = airflow_server.AirflowSettings(
        home=Path(home),
        port=port or airflow_server.pick_free_port(),
        dags_folder=Path(dags_folder),
        plugins_folder=Path(plugins_folder),
        extra_env=dict(extra_env or {}),
        database_url=airflow_database_url(Path(home)),
    )
    instance = airflow_server.start_airflow(settings)
    return AirflowHandle(
        url=instance.url,
        username=instance.username,
        password=instance.password,
        home=instance.home,
        pid=instance.pid,
        env=dict(settings.extra_env),
    )


@pytest.fixture(scope="session")
def repo_airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHandle]:
    handle = start_airflow(tmp_path_factory.mktemp("repo-airflow"))
    yield handle
    handle.stop()
