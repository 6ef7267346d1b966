"""scripts/check_clean.py: what CI runs after `make down` finds what was left, and only that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.repo_root import REPO_ROOT

CHECK = REPO_ROOT / "scripts" / "check_clean.py"


def run_check(checkout: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--checkout", str(checkout)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_clean_checkout_passes(tmp_path: Path) -> None:
    result = run_check(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "nothing of" in result.stdout


def test_a_process_left_in_the_checkout_is_named(tmp_path: Path) -> None:
    leftover = subprocess.Popen(
        ["sleep", "60"], cwd=tmp_path, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        result = run_check(tmp_path)
    finally:
        leftover.kill()
        leftover.wait()
    assert result.returncode == 1
    assert f"left behind: process: pid {leftover.pid} (cwd {tmp_path}" in result.stderr
    assert run_check(tmp_path).returncode == 0


def test_a_process_of_another_checkout_is_not_counted(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "other").mkdir()
    other = subprocess.Popen(["sleep", "60"], cwd=tmp_path / "other", stdin=subprocess.DEVNULL)
    try:
        result = run_check(tmp_path / "mine")
    finally:
        other.kill()
        other.wait()
    assert result.returncode == 0, result.stderr


def test_a_process_in_the_database_dir_outside_the_checkout_is_named(tmp_path: Path) -> None:
    """A state dir the postgres user cannot enter keeps its cluster elsewhere (location)."""
    checkout, database = tmp_path / "checkout", tmp_path / "elsewhere"
    (checkout / ".state" / "postgres").mkdir(parents=True)
    database.mkdir()
    (checkout / ".state" / "postgres" / "location").write_text(f"{database}\n")
    leftover = subprocess.Popen(["sleep", "60"], cwd=database, stdin=subprocess.DEVNULL)
    try:
        result = run_check(checkout)
    finally:
        leftover.kill()
        leftover.wait()
    assert result.returncode == 1
    assert f"pid {leftover.pid} (cwd {database}" in result.stderr
