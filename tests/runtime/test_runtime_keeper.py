"""The model owner's keeper container (runtime/keeper.py) as a subprocess, as exec runs it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

KEEPER = ("-m", "runtime.keeper")  # as protocol.KEEPER_COMMAND runs it
DEADLINE_S = 30.0


def keeper(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", *KEEPER, *args],
        env={"PATH": os.environ["PATH"], "TFJOB_WORKSPACE": str(workspace)},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "model" / "variables").mkdir(parents=True)
    (ws / "code").mkdir()
    (ws / "model" / "saved_model.pb").write_bytes(b"graph" * 1000)
    (ws / "model" / "variables" / "variables.data").write_bytes(bytes(range(256)) * 40)
    (ws / "metrics.json").write_text('{"accuracy": 0.97}')
    (ws / "code" / "secret.txt").write_text("not the model")
    return ws


def test_list_names_every_model_file_and_the_metrics_with_size_and_sha256(workspace):
    done = keeper(workspace, "list")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert listing["version"] == 1
    files = {entry["path"]: entry for entry in listing["files"]}
    assert list(files) == ["model/saved_model.pb", "model/variables/variables.data", "metrics.json"]
    data = (workspace / "model" / "variables" / "variables.data").read_bytes()
    assert files["model/variables/variables.data"] == {
        "path": "model/variables/variables.data",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_list_of_a_workspace_without_model_or_metrics_is_empty(tmp_path):
    done = keeper(tmp_path, "list")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == []


def test_read_gives_base64_of_the_byte_range(workspace):
    data = (workspace / "model" / "variables" / "variables.data").read_bytes()
    done = keeper(workspace, "read", "model/variables/variables.data", "100", "5000")
    assert done.returncode == 0, done.stderr
    assert base64.b64decode(done.stdout) == data[100:5100]
    past_end = keeper(workspace, "read", "metrics.json", "1000", "10")
    assert past_end.returncode == 0 and past_end.stdout == ""


@pytest.mark.parametrize(
    "path",
    [
        "code/secret.txt",
        "/etc/passwd",
        "model/../code/secret.txt",
        "../outside",
        "model",
        "model/escape",
    ],
)
def test_read_refuses_anything_but_the_model_and_the_metrics(workspace, path):
    (workspace.parent / "outside").write_text("outside")
    (workspace / "model" / "escape").symlink_to(workspace / "code" / "secret.txt")
    done = keeper(workspace, "read", path, "0", "10")
    assert done.returncode == 77, (done.stdout, done.stderr)
    assert done.stdout == "" and "refused" in done.stderr


def test_a_symlink_leading_out_of_the_model_is_not_listed(workspace):
    (workspace / "model" / "escape").symlink_to(workspace / "code" / "secret.txt")
    (workspace / "model" / "inside").symlink_to(workspace / "model" / "saved_model.pb")
    listed = [e["path"] for e in json.loads(keeper(workspace, "list").stdout)["files"]]
    assert "model/escape" not in listed and "model/inside" in listed


def test_a_metrics_symlink_is_refused(workspace):
    (workspace / "metrics.json").unlink()
    (workspace / "metrics.json").symlink_to(workspace / "code" / "secret.txt")
    assert keeper(workspace, "read", "metrics.json", "0", "10").returncode == 77
    assert "metrics.json" not in keeper(workspace, "list").stdout


def test_a_missing_file_is_66_and_bad_arguments_are_usage_errors(workspace):
    assert keeper(workspace, "read", "model/nothing", "0", "10").returncode == 66
    assert keeper(workspace, "read", "metrics.json", "x", "10").returncode == 2
    assert keeper(workspace, "read", "metrics.json", "0", str(64 * 2**20)).returncode == 2
    assert keeper(workspace, "frobnicate").returncode == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_without_arguments_it_sleeps_until_sigterm_or_sigint_and_exits_0(tmp_path, signum):
    proc = subprocess.Popen(
        [sys.executable, "-I", *KEEPER],
        env={"PATH": os.environ["PATH"], "TFJOB_WORKSPACE": str(tmp_path)},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "keeping" in proc.stderr.readline()  # type: ignore[union-attr]  # handlers installed
    assert proc.poll() is None
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert signal.Signals(signum).name in err
