"""Bundles built to hurt the reader: header bombs, trailing data, conflicts, failing disks.

Memory is measured in a subprocess (ru_maxrss before and after the call);
timing is not asserted here (bench/bench_bundle_bomb.py reports it).
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import runtime.bundleread
from harness.bundle_fixtures import (
    BAD_BUNDLES,
    GOOD_FILES,
    REPO,
    add_bytes,
    build_good,
    manifest_for,
    write_archive,
    write_header_bomb,
)
from runtime.bundle import (
    MANIFEST_NAME,
    MAX_EXTENDED_HEADER_BYTES,
    BundleError,
    Refusal,
    extract_bundle,
    verify_bundle,
)

MIB = 1024 * 1024

MEASURE = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from runtime.bundle import BundleError, extract_bundle, verify_bundle
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    if sys.argv[2] == "verify":
        verify_bundle(sys.argv[3])
    else:
        extract_bundle(sys.argv[3], sys.argv[4])
    outcome = "accepted"
except BundleError as exc:
    outcome = exc.reason.name
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"outcome": outcome, "growth_kib": after - before}))
"""


def measure(action: str, bundle: Path, dest: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(REPO), action, str(bundle), str(dest)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME], ids=["pax", "gnu"])
@pytest.mark.parametrize("action", ["verify", "extract"])
def test_a_64_kb_header_bomb_is_refused_without_the_reader_growing(
    tmp_path: Path, kind: bytes, action: str
) -> None:
    bomb = write_header_bomb(tmp_path / "bomb.tar.gz", kind, 64 * MIB)
    assert bomb.stat().st_size < 80 * 1024  # 64 MiB of header in ~64 KB: ~190 MiB RSS before
    report = measure(action, bomb, tmp_path / "workspace")
    assert report["outcome"] == Refusal.EXTENDED_HEADER.name
    assert report["growth_kib"] < 64 * 1024


def test_the_refusal_names_the_header_kind_its_size_and_the_limit(tmp_path: Path) -> None:
    bomb = write_header_bomb(tmp_path / "bomb.tar.gz", tarfile.XHDTYPE, 4 * MIB)
    with pytest.raises(BundleError) as caught:
        verify_bundle(bomb)
    assert f"pax header 'pax' of {4 * MIB} bytes; at most {MAX_EXTENDED_HEADER_BYTES}" in str(
        caught.value
    )


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_ordinary_extended_headers_for_long_paths_are_accepted(tmp_path: Path, fmt: int) -> None:
    files = {**GOOD_FILES, "code/" + "/".join(["d" * 90] * 8) + "/x.py": b"x = 1\n"}
    path = tmp_path / "long.tar.gz"
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        add_bytes(tar, MANIFEST_NAME, manifest_for(files))
        for name, body in files.items():
            add_bytes(tar, name, body)
    assert len(verify_bundle(path).files) == 3
    extract_bundle(path, tmp_path / "ws")


def _raw_header(name: str, kind: bytes, body: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(body)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + body + b"\0" * (-len(body) % 512)


def _archive_with_prefix_blocks(path: Path, blocks: bytes) -> Path:
    """A good bundle with `blocks` (raw tar headers) right before code/train.py."""
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        add_bytes(tar, MANIFEST_NAME, manifest_for(GOOD_FILES))
        split = tar.offset
        for name, body in GOOD_FILES.items():
            add_bytes(tar, name, body)
    data = good.getvalue()
    path.write_bytes(gzip.compress(data[:split] + blocks + data[split:]))
    return path


def test_a_long_chain_of_small_extended_headers_is_refused_not_recursed_into(
    tmp_path: Path,
) -> None:
    record = b"20 comment=aaaaaaaa\n"
    chain = b"".join(_raw_header("pax", tarfile.XHDTYPE, record) for _ in range(5000))
    path = _archive_with_prefix_blocks(tmp_path / "chain.tar.gz", chain)
    with pytest.raises(BundleError, match="more than 8 extended headers in a row") as caught:
        extract_bundle(path, tmp_path / "ws")
    assert caught.value.reason is Refusal.EXTENDED_HEADER


def test_global_pax_headers_adding_up_past_the_limit_are_refused(tmp_path: Path) -> None:
    record = b"%d comment=" % 60_000
    body = record + b"a" * (60_000 - len(record) - 1) + b"\n"
    globals_ = b"".join(
        _raw_header("g", tarfile.XGLTYPE, body) + _raw_header(f"data/f{i}", b"5", b"")
        for i in range(3)
    )
    path = _archive_with_prefix_blocks(tmp_path / "globals.tar.gz", globals_)
    with pytest.raises(BundleError, match="global pax headers add up to over 65536 bytes"):
        verify_bundle(path)


def test_gnu_sparse_files_are_refused_before_their_map_is_read(tmp_path: Path) -> None:
    sparse = _raw_header("code/train.py", tarfile.GNUTYPE_SPARSE, b"")
    path = _archive_with_prefix_blocks(tmp_path / "sparse.tar.gz", sparse)
    with pytest.raises(BundleError, match="code/train.py: device files.*GNU sparse file"):
        verify_bundle(path)


def test_zero_padding_of_a_larger_tar_record_is_accepted_but_not_without_bound(
    tmp_path: Path,
) -> None:
    tar_bytes = gzip.decompress(build_good(tmp_path / "good.tar.gz").read_bytes())
    padded = tmp_path / "padded.tar.gz"
    padded.write_bytes(gzip.compress(tar_bytes + bytes(128 * 1024)))
    verify_bundle(padded)
    bomb = tmp_path / "zeros.tar.gz"
    bomb.write_bytes(gzip.compress(tar_bytes + bytes(2 * MIB)))
    with pytest.raises(BundleError, match="data after the end of the archive .over 1048576 bytes"):
        verify_bundle(bomb)


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_verify_and_extract_refuse_with_the_same_message(tmp_path: Path, case: str) -> None:
    build, _reason, _text = BAD_BUNDLES[case]
    path = build(tmp_path / f"{case}.tar.gz")
    limit = 4096 if case == "oversized" else 20 * 1024**3
    with pytest.raises(BundleError) as verified:
        verify_bundle(path, limit)
    with pytest.raises(BundleError) as extracted:
        extract_bundle(path, tmp_path / "ws", limit)
    assert str(verified.value) == str(extracted.value)


def test_a_failing_disk_is_a_bundle_error_naming_the_member_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "ws"
    (dest / "code").mkdir(parents=True)
    (dest / "code" / "previous.py").write_text("kept")

    def full(path: object, mode: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(runtime.bundleread.os, "chmod", full)
    with pytest.raises(BundleError) as caught:
        extract_bundle(build_good(tmp_path / "good.tar.gz"), dest)
    assert caught.value.reason is Refusal.EXTRACT_FAILED
    assert "code/train.py: cannot be extracted (OSError: No space left on device" in str(
        caught.value
    )
    assert sorted(p.name for p in dest.iterdir()) == ["code"]
    assert [p.name for p in (dest / "code").iterdir()] == ["previous.py"]


def test_a_destination_that_cannot_be_made_is_a_bundle_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(BundleError, match="<archive>: cannot be extracted .*Error"):
        extract_bundle(build_good(tmp_path / "good.tar.gz"), tmp_path / "a-file" / "ws")


def test_non_utf8_and_overlong_names_are_refused_by_both(tmp_path: Path) -> None:
    files = {**GOOD_FILES, "code/" + "n" * 256: b"1"}
    path = write_archive(
        tmp_path / "long.tar.gz",
        manifest_for(files),
        lambda tar: [add_bytes(tar, n, b) for n, b in files.items()],
    )
    with pytest.raises(BundleError, match="path is too long .a component over 255 bytes"):
        verify_bundle(path)
    raw = tmp_path / "latin1.tar.gz"
    with tarfile.open(raw, "w:gz", format=tarfile.USTAR_FORMAT, encoding="latin-1") as tar:
        add_bytes(tar, MANIFEST_NAME, manifest_for(GOOD_FILES))
        add_bytes(tar, "code/caf\xe9.py", b"1")
    with pytest.raises(BundleError, match="not valid UTF-8"):
        extract_bundle(raw, tmp_path / "ws")


def test_a_file_path_with_a_trailing_slash_is_refused(tmp_path: Path) -> None:
    files = {**GOOD_FILES, "code/a/": b"1"}
    path = write_archive(tmp_path / "slash.tar.gz", manifest_for(files), lambda tar: None)
    with pytest.raises(BundleError, match="code/a/: path is not a normalized relative path"):
        verify_bundle(path)


def test_a_manifest_at_its_size_limit_is_read_within_the_memory_bound(tmp_path: Path) -> None:
    """The manifest's size limit bounds memory: ~60,000 entries listed, none in the archive."""
    from runtime.bundle import MAX_MANIFEST_BYTES

    entry = '{"path": "data/d/f-%07d.bin", "size": 1, "sha256": "%s"}'
    count = MAX_MANIFEST_BYTES // (len(entry % (0, "0" * 64)) + 2) - 10
    files = ", ".join(entry % (i, f"{i:064x}") for i in range(count))
    body = (
        '{"format_version": 1, "name": "big", "created": "2026-12-02T00:00:00Z", '
        f'"files": [{files}], "total_size": {count}}}'
    ).encode()
    assert MAX_MANIFEST_BYTES - 4096 < len(body) <= MAX_MANIFEST_BYTES
    path = tmp_path / "big.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        add_bytes(tar, MANIFEST_NAME, body)
    report = measure("verify", path, tmp_path / "ws")
    assert report["outcome"] == Refusal.MISSING.name
    assert report["growth_kib"] < 64 * 1024


def test_packing_refuses_a_manifest_over_its_limit_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime.bundle
    from runtime.bundle import write_bundle

    (tmp_path / "src" / "code").mkdir(parents=True)
    for i in range(5):
        (tmp_path / "src" / "code" / f"m{i}.py").write_text("x = 1\n")
    monkeypatch.setattr(runtime.bundle, "MAX_MANIFEST_BYTES", 300)
    with pytest.raises(BundleError, match=r"for 5 files; at most 300 .*TFRecord or tar shards"):
        write_bundle(tmp_path / "src", tmp_path / "out.tar.gz", "many")
    assert not (tmp_path / "out.tar.gz").exists()
