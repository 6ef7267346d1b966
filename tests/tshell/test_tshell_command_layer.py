"""tshell's command layer: every command's errors end as one message and an exit code, and
the cluster and the embedded default are found without knowing where tshell is installed."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

import tshell
from tshell.airflow_client import AirflowForbiddenError, AirflowNotFoundError
from tshell.cli import build_parser
from tshell.cli import run as run_tshell_cli
from tshell.command import run_command
from tshell.config import ConfigError, find_embedded_path, find_kubeconfig, load_config
from tshell.exitcodes import CommandError, ExitCode
from tshell.tenant_commands import find_cluster_kubeconfig


def run_raising(error: BaseException, prefix: str = "error: ") -> ExitCode:
    def handler(args: argparse.Namespace, out: io.StringIO) -> ExitCode:
        raise error

    return run_command(argparse.Namespace(func=handler, error_prefix=prefix), io.StringIO())


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (CommandError("no such request file", ExitCode.INVALID_REQUEST), ExitCode.INVALID_REQUEST),
        (ConfigError("no Airflow password"), ExitCode.CONFIG_ERROR),
        (AirflowNotFoundError("no run r"), ExitCode.NOT_FOUND),
        (AirflowForbiddenError("HTTP 403"), ExitCode.AIRFLOW_ERROR),
    ],
)
def test_a_commands_error_is_one_line_with_its_prefix_and_exit_code(error, code, capsys):
    assert run_raising(error, "tshell: ") == code
    assert capsys.readouterr().err == f"tshell: {error}\n"


def test_an_interrupted_command_says_so_and_exits_130(capsys):
    assert run_raising(KeyboardInterrupt()) == ExitCode.INTERRUPTED == 130
    assert capsys.readouterr().err == "tshell: interrupted\n"


def test_pack_upload_and_tenants_keep_their_own_message_prefixes(tmp_path, capsys):
    assert run_tshell_cli(["upload", str(tmp_path / "nope"), "s3://b/p/"]) == 2
    assert capsys.readouterr().err == f"tshell: upload: {str(tmp_path / 'nope')!r} is not a file\n"
    assert run_tshell_cli(["push", str(tmp_path), "s3://b/p/", "--part-size", "4"]) == 2
    assert "tshell: --part-size: 4 given; S3 requires at least 5 MiB parts" in (
        capsys.readouterr().err
    )
    bad = tmp_path / "tenants.yaml"
    bad.write_text("tenants:\n  - name: Bad_Name\n")
    assert run_tshell_cli(["tenants", "list", "--file", str(bad)]) == 1
    assert capsys.readouterr().err.startswith("tshell tenants: ")


def test_tenants_without_an_action_prints_its_help_and_exits_2(capsys):
    assert run_tshell_cli(["tenants"]) == 2
    assert "usage: tshell tenants" in capsys.readouterr().err


def test_the_kubeconfig_is_looked_up_in_one_order():
    env = {"TSHELL_KUBECONFIG": "/t", "KUBECONFIG": f"/k1{os.pathsep}/k2"}
    file_data = {"kubernetes": {"kubeconfig": "/f"}}
    services = {"localkube": {"kubeconfig": "/s"}}
    assert find_kubeconfig(env, file_data, services, given="/g") == "/g"
    assert find_kubeconfig(env, file_data, services) == "/t"
    assert find_kubeconfig({"KUBECONFIG": env["KUBECONFIG"]}, file_data, services) == "/f"
    assert find_kubeconfig({"KUBECONFIG": env["KUBECONFIG"]}, {}, services) == "/k1"
    assert find_kubeconfig({}, {}, services) == "/s"
    assert find_kubeconfig({}, {}, {}) is None


def test_tenants_fall_back_to_the_home_kubeconfig(tmp_path, monkeypatch):
    for name in ("TSHELL_KUBECONFIG", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TSHELL_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("TSHELL_SERVICES_FILE", str(tmp_path / "no-services.json"))
    assert find_cluster_kubeconfig(None) == Path("~/.kube/config").expanduser()
    monkeypatch.setenv("KUBECONFIG", "/k")
    assert find_cluster_kubeconfig(None) == Path("/k")
    assert find_cluster_kubeconfig("/given") == Path("/given")


def test_the_embedded_default_is_found_from_the_current_directory_up(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    state = checkout / ".state"
    (state / "airflow").mkdir(parents=True)
    (state / "airflow" / "tfjob_users.json").write_text(json.dumps({"admin": "pw"}))
    (state / "services.json").write_text(
        json.dumps(
            {
                "airflow": {"url": "http://127.0.0.1:18080"},
                "localkube": {"kubeconfig": "/lk"},
            }
        )
    )
    inside = checkout / "bundles" / "digits"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)
    assert find_embedded_path(Path(".state/services.json")) == state / "services.json"
    config = load_config({}, tmp_path / "missing.yaml")
    assert (config.airflow.url, config.airflow.password) == ("http://127.0.0.1:18080", "pw")
    assert config.kubeconfig == "/lk"


def walk_commands(parser: argparse.ArgumentParser, path: str = "tshell"):
    """(path, parser) of every command and subcommand the CLI offers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from walk_commands(sub, f"{path} {name}")


def test_every_command_is_set_through_the_command_layer():
    commands = dict(walk_commands(build_parser()))
    assert {"tshell pack", "tshell submit", "tshell tenants apply", "tshell completion"} <= set(
        commands
    )
    for path, parser in commands.items():
        assert {"func", "error_prefix"} <= set(parser._defaults), path


def test_the_cli_knows_no_path_of_its_checkout():
    package = Path(tshell.__file__).parent
    for module in sorted(package.rglob("*.py")):
        assert "__file__" not in module.read_text(), module
