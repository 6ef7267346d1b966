"""`make lint` checks both the lint rules and the layout, and `make test` runs it before pytest.

Read through `make -n` (make prints the commands of a target without running them), so the
test sees what the Makefile really does, prerequisites included, and runs nothing.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.repo_root import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def list_make_commands(target: str) -> list[str]:
    done = subprocess.run(
        ["make", "-n", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def find_line(lines: list[str], fragment: str) -> int:
    matches = [index for index, line in enumerate(lines) if fragment in line]
    assert matches, f"no command of the target contains {fragment!r}: {lines}"
    return matches[0]


def test_make_lint_checks_the_rules_and_the_layout():
    lines = list_make_commands("lint")
    find_line(lines, "ruff check .")
    find_line(lines, "ruff format --check .")


def test_make_test_lints_before_any_test_runs():
    lines = list_make_commands("test")
    pytest_at = find_line(lines, "-m pytest")
    assert find_line(lines, "ruff check .") < pytest_at
    assert find_line(lines, "ruff format --check .") < pytest_at
