"""`tshell completion bash`: the script made from the real parser completes in a real shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.repo_root import REPO_ROOT


def completion_script(shell: str, tmp_path: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "tshell", "completion", shell],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    path = tmp_path / f"tshell.{shell}"
    path.write_text(result.stdout)
    return path


def complete_in_bash(script: Path, line: str) -> list[str]:
    """What Tab offers at the end of line, as bash's programmable completion computes it."""
    driver = (
        f"source {script}\n"
        'read -ra COMP_WORDS <<<"$LINE"\n'
        '[[ "$LINE" == *" " ]] && COMP_WORDS+=("")\n'
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        "$(complete -p tshell | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p')\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver],
        env={"LINE": line, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_bash_completes_subcommands_options_and_choices(tmp_path: Path) -> None:
    script = completion_script("bash", tmp_path)
    assert complete_in_bash(script, "tshell sub") == ["submit"]
    assert complete_in_bash(script, "tshell submit --w") == ["--wait"]
    assert complete_in_bash(script, "tshell tenants a") == ["apply"]
    assert complete_in_bash(script, "tshell download RUN ") == ["model", "logs"]
    assert complete_in_bash(script, "tshell list --state s") == ["success"]
    assert "--follow" in complete_in_bash(script, "tshell logs RUN --role worker -")


def test_bash_completes_files_where_a_path_is_expected(tmp_path: Path) -> None:
    script = completion_script("bash", tmp_path)
    assert complete_in_bash(script, f"tshell submit {REPO_ROOT}/bundles/digits-ps/req") == [
        f"{REPO_ROOT}/bundles/digits-ps/request.yaml"
    ]


def test_every_command_of_the_parser_is_offered(tmp_path: Path) -> None:
    from tshell.cli import build_parser

    commands = next(
        action for action in build_parser()._actions if action.dest == "command"
    ).choices
    offered = complete_in_bash(completion_script("bash", tmp_path), "tshell ")
    assert sorted(offered) == sorted(commands)
