"""Where a tshell under test finds Airflow: the one place tests set tshell's environment.

tshell reads its settings from the environment, a config file and the embedded
default's services.json, first found wins (tshell/config.py). A test must name
its Airflow and nothing else, so that no setting of the machine it runs on
(a config file, a running `make up`, KUBECONFIG, S3 variables) leaks in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# What tshell or boto3 would otherwise pick up from the machine.
MACHINE_SETTINGS = (
    "TSHELL_KUBECONFIG",
    "KUBECONFIG",
    "TSHELL_PROGRESS",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "TSHELL_S3_ENDPOINT_URL",
)


def point_tshell_at(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, username: str, password: str
) -> None:
    """tshell talks to the Airflow at `url` as `username`, and knows nothing else."""
    monkeypatch.setenv("TSHELL_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("TSHELL_SERVICES_FILE", str(tmp_path / "no-services.json"))
    monkeypatch.setenv("TSHELL_AIRFLOW_URL", url)
    monkeypatch.setenv("TSHELL_USERNAME", username)
    monkeypatch.setenv("TSHELL_PASSWORD", password)
    for name in MACHINE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
