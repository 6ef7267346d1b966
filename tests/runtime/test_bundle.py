"""The bundle format and the one safety check (runtime/bundle.py), host side."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.bundle_fixtures import BAD_BUNDLES, GOOD_FILES, OVERSIZE_LIMIT, build_good
from runtime.bundle import (
    DEFAULT_MAX_TOTAL_SIZE,
    MANIFEST_NAME,
    BundleError,
    check_member_path,
    extract_bundle,
    verify_bundle,
    write_bundle,
)


def make_project(root: Path) -> Path:
    (root / "code" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "code" / ".git").mkdir()
    (root / "data" / "sub").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('train')\n")
    (root / "code" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "code" / "run.sh", 0o755)
    (root / "code" / "pkg" / "model.py").write_text("X = 1\n")
    (root / "code" / "pkg" / "model.pyc").write_bytes(b"\0compiled")
    (root / "code" / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (root / "code" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "data" / "sub" / "rows.csv").write_text("a,b\n1,2\n")
    (root / "data" / "blob.bin").write_bytes(os.urandom(300_000))
    (root / "code" / "link_to_model.py").symlink_to("pkg/model.py")
    (root / "request.yaml").write_text("name: demo\n")
    return root


def bad_limit(case: str) -> int:
    return OVERSIZE_LIMIT if case == "oversized" else DEFAULT_MAX_TOTAL_SIZE


def test_pack_lists_every_file_in_a_manifest_that_comes_first(tmp_path: Path) -> None:
    src = make_project(tmp_path / "proj")
    info = write_bundle(src, tmp_path / "out" / "demo.tar.gz", "demo")
    with tarfile.open(info.path) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(MANIFEST_NAME).read())  # type: ignore[union-attr]
    assert names[0] == MANIFEST_NAME
    expected = [
        "code/link_to_model.py",
        "code/pkg/model.py",
        "code/run.sh",
        "code/train.py",
        "data/blob.bin",
        "data/sub/rows.csv",
    ]
    assert names[1:] == expected
    assert [f["path"] for f in manifest["files"]] == expected
    assert manifest["name"] == "demo" and manifest["format_version"] == 1
    assert manifest["total_size"] == sum(f["size"] for f in manifest["files"])
    assert info.skipped == ("request.yaml",)


def test_pack_is_deterministic_apart_from_the_creation_time(tmp_path: Path) -> None:
    src = make_project(tmp_path / "proj")
    first = write_bundle(src, tmp_path / "a.tar.gz", "demo")
    second = write_bundle(src, tmp_path / "b.tar.gz", "demo")
    assert first.manifest.files == second.manifest.files
    if first.manifest.created == second.manifest.created:
        assert first.archive_sha256 == second.archive_sha256


def test_directory_without_code_or_data_is_packed_as_code(tmp_path: Path) -> None:
    src = tmp_path / "flat"
    src.mkdir()
    (src / "main.py").write_text("pass\n")
    info = write_bundle(src, tmp_path / "flat.tar.gz", "flat")
    assert [f.path for f in info.manifest.files] == ["code/main.py"]


def test_link_pointing_outside_the_source_is_refused_when_packing(tmp_path: Path) -> None:
    src = make_project(tmp_path / "proj")
    (tmp_path / "secret.txt").write_text("secret")
    (src / "code" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(BundleError, match="leak.txt: cannot be packed .link points outside"):
        write_bundle(src, tmp_path / "x.tar.gz", "x")


def test_extract_round_trip_restores_contents_and_exec_bits(tmp_path: Path) -> None:
    src = make_project(tmp_path / "proj")
    info = write_bundle(src, tmp_path / "demo.tar.gz", "demo")
    manifest = verify_bundle(info.path)
    assert manifest == info.manifest
    dest = tmp_path / "workspace"
    extract_bundle(info.path, dest)
    assert (dest / "code" / "train.py").read_text() == "print('train')\n"
    assert (dest / "code" / "link_to_model.py").read_text() == "X = 1\n"
    assert not (dest / "code" / "link_to_model.py").is_symlink()
    assert (dest / "data" / "blob.bin").read_bytes() == (src / "data" / "blob.bin").read_bytes()
    assert os.stat(dest / "code" / "run.sh").st_mode & 0o111
    assert not (dest / "code" / ".git").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["code", "data"]


def test_extract_replaces_an_earlier_extraction(tmp_path: Path) -> None:
    dest = tmp_path / "workspace"
    (dest / "code").mkdir(parents=True)
    (dest / "code" / "stale.py").write_text("old")
    (dest / "model").mkdir()
    extract_bundle(build_good(tmp_path / "good.tar.gz"), dest)
    assert sorted(p.name for p in (dest / "code").iterdir()) == ["train.py"]
    assert (dest / "model").is_dir()


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_verify_refuses_bad_bundle_naming_member_and_reason(tmp_path: Path, case: str) -> None:
    build, reason, text = BAD_BUNDLES[case]
    path = build(tmp_path / f"{case}.tar.gz")
    with pytest.raises(BundleError) as caught:
        verify_bundle(path, bad_limit(case))
    assert caught.value.reason is reason
    assert text in str(caught.value)


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_extract_refuses_bad_bundle_and_leaves_nothing_behind(tmp_path: Path, case: str) -> None:
    build, reason, text = BAD_BUNDLES[case]
    path = build(tmp_path / f"{case}.tar.gz")
    dest = tmp_path / "workspace"
    (dest / "code").mkdir(parents=True)
    (dest / "code" / "previous.py").write_text("kept")
    with pytest.raises(BundleError) as caught:
        extract_bundle(path, dest, bad_limit(case))
    assert caught.value.reason is reason
    assert text in str(caught.value)
    assert sorted(p.name for p in dest.iterdir()) == ["code"]
    assert [p.name for p in (dest / "code").iterdir()] == ["previous.py"]
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/tfjob-absolute.txt").exists()


def test_manifest_listing_an_unsafe_path_is_refused(tmp_path: Path) -> None:
    from harness.bundle_fixtures import add_bytes, manifest_for, write_archive

    files = {**GOOD_FILES, "code/../../x": b"1"}
    path = write_archive(
        tmp_path / "m.tar.gz", manifest_for(files), lambda tar: add_bytes(tar, "code/train.py", b"")
    )
    with pytest.raises(BundleError, match=r"code/\.\./\.\./x: path contains '\.\.'"):
        verify_bundle(path)


path_parts = st.sampled_from(["code", "data", "..", ".", "", "a", "b.py", "/", "\\", "C:", "x\x00"])


@settings(max_examples=300, deadline=None)
@given(st.lists(path_parts, min_size=1, max_size=6))
def test_every_accepted_member_path_stays_inside_code_or_data(parts: list[str]) -> None:
    name = "/".join(parts)
    try:
        check_member_path(name)
    except BundleError:
        return
    root = "/workspace"
    resolved = os.path.normpath(os.path.join(root, name))
    assert resolved.startswith(("/workspace/code/", "/workspace/data/")) or resolved in (
        "/workspace/code",
        "/workspace/data",
    )


def test_tarfile_data_filter_runs_as_a_second_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse_everything(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        raise tarfile.FilterError(f"test filter refused {member.name}")

    monkeypatch.setattr(tarfile, "data_filter", refuse_everything)
    with pytest.raises(BundleError, match="code/train.py: refused by tarfile's data filter"):
        verify_bundle(build_good(tmp_path / "g.tar.gz"))
