"""`tshell pack` and the command registry, in process.

(The S3 commands: tests/s3/test_s3_roundtrip.py.)
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

import runtime.bundle
from tshell.cli import build_parser, run


def make_project(root: Path, big: int = 2000) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "code" / "train.py").write_text("print('x')\n")
    (root / "data" / "big.bin").write_bytes(b"\1" * big)
    return root


def test_registry_offers_pack_upload_and_push() -> None:
    help_text = build_parser().format_help()
    for command in ("pack", "upload", "push"):
        assert command in help_text


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([]) == 2
    assert "usage: tshell" in capsys.readouterr().err


def test_pack_prints_size_and_sha256_of_the_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_project(tmp_path / "mnist")
    monkeypatch.chdir(tmp_path)
    assert run(["pack", str(src)]) == 0
    out = capsys.readouterr().out
    archive = tmp_path / "mnist.tar.gz"
    assert f"sha256 {hashlib.sha256(archive.read_bytes()).hexdigest()}" in out
    assert f"({archive.stat().st_size} bytes)" in out and "2 files" in out


def test_pack_into_a_directory_with_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = make_project(tmp_path / "proj")
    (tmp_path / "out").mkdir()
    assert run(["pack", str(src), "-o", str(tmp_path / "out"), "--name", "digits"]) == 0
    with tarfile.open(tmp_path / "out" / "digits.tar.gz") as tar:
        assert tar.getnames() == ["MANIFEST.json", "code/train.py", "data/big.bin"]


def test_pack_warns_about_very_large_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime.bundle, "LARGE_FILE_BYTES", 1000)
    src = make_project(tmp_path / "proj", big=5000)
    assert run(["pack", str(src), "-o", str(tmp_path / "p.tar.gz")]) == 0
    err = capsys.readouterr().err
    assert "warning: data/big.bin is" in err and "code/train.py" not in err


def test_pack_shows_a_progress_bar_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TSHELL_PROGRESS", "1")
    src = make_project(tmp_path / "proj")
    assert run(["pack", str(src), "-o", str(tmp_path / "p.tar.gz")]) == 0
    assert "pack proj [" in capsys.readouterr().err


def test_pack_of_a_missing_directory_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["pack", str(tmp_path / "nope")]) == 1
    assert "nope: cannot be packed (not a directory)" in capsys.readouterr().err
