"""Files holding credentials are 0600 from their creation: services.json/.env, Airflow's secrets
and generated password file, and the logs of background servers (they print credentials)."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from typing import Any

from harness.repo_root import REPO_ROOT

REPO = REPO_ROOT


def load_script(name: str) -> Any:
    """scripts/ is not a package: load a script by path."""
    spec = importlib.util.spec_from_file_location(
        f"tfjob_scripts_{name}", REPO / "scripts" / f"{name}.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


services = load_script("services")
airflow_server = services.airflow_server
background_server = load_script("background_server")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_services_json_and_env_hold_the_secret_and_are_0600(tmp_path: Path) -> None:
    paths = services.StatePaths(tmp_path / "state")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / services.ENV_FILE).write_text("old, world-readable\n")
    record = {
        "s3": {
            "endpoint_url": "http://127.0.0.1:9000",
            "access_key": "k",
            "secret_key": "the-secret",
            "region": "us-east-1",
            "buckets": ["b"],
        },
        "localkube": {"api_url": "http://127.0.0.1:6443", "kubeconfig": "/k"},
        "airflow": {"url": "http://127.0.0.1:8080", "username": "admin", "home": "/a"},
    }
    services.write_service_files(paths, record)
    for name in (services.SERVICES_FILE, services.ENV_FILE):
        assert mode(paths.root / name) == 0o600, name
    assert json.loads((paths.root / services.SERVICES_FILE).read_text()) == record
    assert "the-secret" in (paths.root / services.ENV_FILE).read_text()


def test_the_pods_are_forwarded_to_the_s3_pod_facing_listener() -> None:
    ready = {"endpoint": "http://127.0.0.1:9000", "pod_endpoint": "http://127.0.0.2:9000"}
    assert services.pod_forward_spec(ready) == "9000=127.0.0.2:9000"


def test_airflow_home_and_secrets_are_private(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    secrets = airflow_server.load_or_create_secrets(home)
    assert mode(home) == 0o700
    assert mode(home / airflow_server.SECRETS_FILE) == 0o600
    assert airflow_server.load_or_create_secrets(home) == secrets


def test_the_users_file_is_made_0600_when_read(tmp_path: Path) -> None:
    passwords = tmp_path / airflow_server.USERS_FILE
    passwords.write_text(json.dumps({"admin": "pw"}))
    passwords.chmod(0o644)  # as an older version left it
    assert airflow_server.read_admin_password(tmp_path) == "pw"
    assert mode(passwords) == 0o600


def test_background_servers_get_a_private_log_and_the_umask_asked_for(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("from an older run\n")
    log.chmod(0o644)
    made = tmp_path / "made-by-child"
    child = background_server.spawn_detached(
        ["sh", "-c", f"echo started; : > {made}"], log, umask=airflow_server.AIRFLOW_UMASK
    )
    assert child.wait(timeout=10) == 0
    assert mode(log) == 0o600 and "started" in log.read_text()
    assert mode(made) == 0o600
