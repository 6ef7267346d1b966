"""Before the demo starts anything: a taken port or a missing root is named, with what to do.

Fast: no service is started; a test holds a port itself and runs the preflight
of scripts/services.py (the one `make demo` and `make up` run) against it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.repo_root import REPO_ROOT
from scripts import (
    demo,  # noqa: E402
    preflight,  # noqa: E402
    services,  # noqa: E402
)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 that this process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_taken_port_is_named_with_its_holder_and_what_to_do(
    tmp_path: Path, held_port: int
) -> None:
    with pytest.raises(services.PreflightError) as caught:
        services.check_preflight(services.StatePaths(tmp_path), 0, 0, held_port, uid=0)
    message = str(caught.value)
    assert f"port {held_port} (Airflow) on 127.0.0.1 is taken by pid {os.getpid()}" in message
    assert f"ss -ltnp 'sport = :{held_port}'" in message
    assert "--airflow-port PORT" in message
    assert "root" not in message


def test_not_root_is_refused_with_how_to_run_it(tmp_path: Path) -> None:
    with pytest.raises(services.PreflightError) as caught:
        services.check_preflight(services.StatePaths(tmp_path), 0, 0, 0, uid=1000)
    assert "uid 1000, not root" in str(caught.value)
    assert "sudo make demo" in str(caught.value)


def test_a_machine_without_nft_is_told_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None)
    with pytest.raises(services.PreflightError) as caught:
        services.check_preflight(services.StatePaths(tmp_path), 0, 0, 0, uid=0)
    assert "nft (nftables) not found" in str(caught.value)
    assert "apt-get install nftables" in str(caught.value)


def test_an_s3_port_the_tenants_network_policies_do_not_allow_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text((REPO_ROOT / "deploy" / "tenants.yaml").read_text())
    monkeypatch.setenv("TFJOB_TENANTS_FILE", str(tenants))
    allowed = [preflight.ServicePort("S3 server", 9000, "--s3-port")]
    assert preflight.check_s3_port_allowed(allowed) == []
    other = [preflight.ServicePort("S3 server", 9100, "--s3-port")]
    [problem] = preflight.check_s3_port_allowed(other)
    assert "port 9100 (--s3-port) is not the tenants file's network.s3_port 9000" in problem
    assert "Use --s3-port 9000" in problem


def test_every_problem_is_named_at_once(tmp_path: Path, held_port: int) -> None:
    with pytest.raises(services.PreflightError) as caught:
        services.check_preflight(services.StatePaths(tmp_path), held_port, 0, 0, uid=1000)
    assert "not root" in str(caught.value)
    assert f"port {held_port} (S3 server)" in str(caught.value)


def test_a_port_held_by_this_state_dirs_own_service_is_fine(tmp_path: Path, held_port: int) -> None:
    # The second `make demo`: the S3 server of this state dir is up on its port.
    (tmp_path / "s3").mkdir()
    (tmp_path / "s3" / "ready.json").write_text(json.dumps({"pid": os.getpid()}))
    services.check_preflight(services.StatePaths(tmp_path), held_port, 0, 0, uid=0)


def test_the_demo_says_nothing_was_started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(demo, "STATE_DIR", tmp_path)
    with pytest.raises(demo.DemoError, match="not root(.|\n)*Nothing was started"):
        demo.check_preflight(uid=1000)


def test_services_up_exits_1_on_a_taken_port_without_starting_anything(
    tmp_path: Path, held_port: int
) -> None:
    state = tmp_path / "state"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "services.py"),
            "up",
            "--state-dir",
            str(state),
            "--s3-port",
            str(held_port),
            "--kube-port",
            "0",
            "--airflow-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"port {held_port} (S3 server) on 127.0.0.1 is taken" in result.stderr
    assert "--s3-port PORT" in result.stderr
    assert "Services that did start" not in result.stderr
    assert not (state / "s3").exists()


def test_the_port_of_this_state_dirs_crashed_airflow_is_left_to_its_restart(
    tmp_path: Path, held_port: int
) -> None:
    # After a kill -9 of Airflow, its API server may still hold the port while the kernel
    # finishes its exit: the pid file remains and start_airflow ends the leftovers and
    # waits for the port itself (scripts/airflow_server.py).
    (tmp_path / "airflow").mkdir()
    (tmp_path / "airflow" / "airflow.pid").write_text(str(find_dead_pid()))
    services.check_preflight(services.StatePaths(tmp_path), 0, 0, held_port, uid=0)


def test_await_port_free_returns_once_the_holder_lets_go_and_not_before(held_port: int) -> None:
    import threading

    from scripts import background_server

    assert background_server.await_port_free(held_port, timeout=0.3) is False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        threading.Timer(0.5, sock.close).start()
        assert background_server.await_port_free(port, timeout=30) is True
        assert background_server.is_port_free(port)


def find_dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
