"""Hand-made good and bad bundles for the safety-check tests (host side and pod side).

`BAD_BUNDLES` maps a case name to (builder, expected Refusal, text the message
must contain). Builders write a .tar.gz at the given path with tarfile
directly, so they can produce what `write_bundle` never would.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from harness.repo_root import REPO_ROOT
from runtime.bundle import MANIFEST_NAME, Refusal

REPO = REPO_ROOT

GOOD_FILES = {"code/train.py": b"print('training')\n", "data/x.csv": b"1,2,3\n"}


def manifest_for(files: dict[str, bytes], name: str = "evil") -> bytes:
    entries = [
        {"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
        for p, b in files.items()
    ]
    return json.dumps(
        {
            "format_version": 1,
            "name": name,
            "created": "2026-12-02T00:00:00Z",
            "files": entries,
            "total_size": sum(len(b) for b in files.values()),
        }
    ).encode()


def add_bytes(tar: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(body))


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    tar.addfile(info)


def write_archive(
    path: Path, manifest: bytes | None, members: Callable[[tarfile.TarFile], None]
) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        if manifest is not None:
            add_bytes(tar, MANIFEST_NAME, manifest)
        members(tar)
    return path


def good_members(tar: tarfile.TarFile) -> None:
    for name, body in GOOD_FILES.items():
        add_bytes(tar, name, body)


def build_good(path: Path) -> Path:
    return write_archive(path, manifest_for(GOOD_FILES), good_members)


def _with_extra(name: str, body: bytes, listed: bool = True) -> Callable[[Path], Path]:
    """Good files plus one member `name`, listed in the manifest unless told otherwise."""

    def build(path: Path) -> Path:
        files = dict(GOOD_FILES)
        manifest = manifest_for({**files, name: body}) if listed else manifest_for(files)

        def members(tar: tarfile.TarFile) -> None:
            good_members(tar)
            add_bytes(tar, name, body)

        return write_archive(path, manifest, members)

    return build


def _with_special(name: str, kind: bytes, linkname: str = "") -> Callable[[Path], Path]:
    def build(path: Path) -> Path:
        def members(tar: tarfile.TarFile) -> None:
            good_members(tar)
            add_special(tar, name, kind, linkname)

        return write_archive(path, manifest_for(GOOD_FILES), members)

    return build


def build_tar_slip(path: Path) -> Path:
    # The manifest check would name the path first; list it unlisted to reach the member check.
    def members(tar: tarfile.TarFile) -> None:
        good_members(tar)
        add_bytes(tar, "code/../../escaped.txt", b"owned\n")

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_absolute(path: Path) -> Path:
    def members(tar: tarfile.TarFile) -> None:
        good_members(tar)
        add_bytes(tar, "/tmp/tfjob-absolute.txt", b"owned\n")

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_checksum_mismatch(path: Path) -> Path:
    def members(tar: tarfile.TarFile) -> None:
        add_bytes(tar, "code/train.py", b"print('TRAINING')\n")  # same size, other bytes
        add_bytes(tar, "data/x.csv", GOOD_FILES["data/x.csv"])

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_size_mismatch(path: Path) -> Path:
    def members(tar: tarfile.TarFile) -> None:
        add_bytes(tar, "code/train.py", GOOD_FILES["code/train.py"] + b"# more\n")
        add_bytes(tar, "data/x.csv", GOOD_FILES["data/x.csv"])

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_missing(path: Path) -> Path:
    def members(tar: tarfile.TarFile) -> None:
        add_bytes(tar, "code/train.py", GOOD_FILES["code/train.py"])

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_oversized(path: Path) -> Path:
    big = {"code/train.py": b"x" * 4096, "data/x.csv": b"y" * 4096}
    return write_archive(
        path, manifest_for(big), lambda tar: [add_bytes(tar, n, b) for n, b in big.items()]
    )


def build_truncated(path: Path) -> Path:
    body = b"0123456789abcdef" * 4096
    files = {"code/train.py": body, "data/x.csv": body[::-1]}
    write_archive(
        path, manifest_for(files), lambda tar: [add_bytes(tar, n, b) for n, b in files.items()]
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


def build_not_gzip(path: Path) -> Path:
    path.write_bytes(b"this is not a gzip file at all" * 10)
    return path


def build_corrupt_deflate(path: Path) -> Path:
    build_good(path)
    data = bytearray(path.read_bytes())
    for i in range(20, min(len(data) - 8, 60)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def build_no_manifest(path: Path) -> Path:
    return write_archive(path, None, good_members)


def build_gzip_of_garbage(path: Path) -> Path:
    path.write_bytes(gzip.compress(b"\x01" * 2048))
    return path


def _archive_bytes(files: dict[str, bytes]) -> bytes:
    """An uncompressed tar of `files` in their order (manifest first, padded to a tar record)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        add_bytes(tar, MANIFEST_NAME, manifest_for(files))
        for name, body in files.items():
            add_bytes(tar, name, body)
    return buffer.getvalue()


def _with_conflict(order: list[str]) -> Callable[[Path], Path]:
    """Members (and manifest entries) in `order`, one path a file and another's directory."""

    def build(path: Path) -> Path:
        files = {name: f"# {name}\n".encode() for name in order}
        path.write_bytes(gzip.compress(_archive_bytes(files)))
        return path

    return build


def build_directory_over_a_file(path: Path) -> Path:
    def members(tar: tarfile.TarFile) -> None:
        good_members(tar)
        add_special(tar, "code/train.py/sub", tarfile.DIRTYPE)

    return write_archive(path, manifest_for(GOOD_FILES), members)


def build_junk_after_the_end_blocks(path: Path) -> Path:
    path.write_bytes(gzip.compress(_archive_bytes(GOOD_FILES) + b"hidden payload\n"))
    return path


def build_second_gzip_member(path: Path) -> Path:
    build_good(path)
    with open(path, "ab") as stream:
        stream.write(gzip.compress(b"a second member nobody checks\n"))
    return path


def build_bytes_after_the_gzip_stream(path: Path) -> Path:
    build_good(path)
    with open(path, "ab") as stream:
        stream.write(b"\x00\x01 not part of any gzip member")
    return path


def build_junk_instead_of_end_blocks(path: Path) -> Path:
    tar = _archive_bytes(GOOD_FILES)
    body = tar.rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    path.write_bytes(gzip.compress(body + b"J" * 512 + b"\0" * 1024))
    return path


def build_bad_gzip_crc(path: Path) -> Path:
    data = bytearray(gzip.compress(_archive_bytes(GOOD_FILES)))
    data[-8] ^= 0xFF  # the CRC32 of the trailer; the deflate data is intact
    path.write_bytes(bytes(data))
    return path


def _extended_header(kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "pax")
    info.type = kind
    info.size = size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def write_header_bomb(path: Path, kind: bytes, payload_bytes: int, level: int = 9) -> Path:
    """A bundle whose second member has a `kind` ('x' pax or 'L' GNU long-name) header
    carrying `payload_bytes` of payload: a few KB compressed per MiB of payload.

    Written in pieces, so building it takes no more memory than a MiB.
    """
    head = io.BytesIO()
    with tarfile.open(fileobj=head, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        add_bytes(tar, MANIFEST_NAME, manifest_for(GOOD_FILES))
    manifest_blocks = head.getvalue().rstrip(b"\0")  # drop the end blocks (the body ends in '}')
    manifest_blocks += b"\0" * (-len(manifest_blocks) % 512)
    with gzip.open(path, "wb", compresslevel=level) as out:
        out.write(manifest_blocks)
        out.write(_extended_header(kind, payload_bytes))
        record = b"%d comment=" % payload_bytes if kind == tarfile.XHDTYPE else b"code/"
        out.write(record)
        chunk = b"a" * (1024 * 1024)
        left = payload_bytes - len(record)
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        out.write(b"\0" * (-payload_bytes % 512))
        manifest_member = 512 + len(manifest_for(GOOD_FILES))
        manifest_member += -manifest_member % 512
        out.write(_archive_bytes(GOOD_FILES)[manifest_member:])  # good members, end blocks
    return path


OVERSIZE_LIMIT = 4096
BAD_BUNDLES: dict[str, tuple[Callable[[Path], Path], Refusal, str]] = {
    "tar-slip": (
        build_tar_slip,
        Refusal.PARENT_REFERENCE,
        "code/../../escaped.txt: path contains '..'",
    ),
    "absolute-path": (
        build_absolute,
        Refusal.ABSOLUTE_PATH,
        "/tmp/tfjob-absolute.txt: absolute path",
    ),
    "symlink-escape": (
        _with_special("code/passwd", tarfile.SYMTYPE, "../../../etc/passwd"),
        Refusal.LINK,
        "code/passwd: links are refused",
    ),
    "symlink-inside": (
        _with_special("code/again.py", tarfile.SYMTYPE, "train.py"),
        Refusal.LINK,
        "code/again.py: links are refused",
    ),
    "hardlink-escape": (
        _with_special("code/shadow", tarfile.LNKTYPE, "/etc/shadow"),
        Refusal.LINK,
        "code/shadow: links are refused",
    ),
    "device-file": (
        _with_special("data/sda", tarfile.BLKTYPE),
        Refusal.SPECIAL_FILE,
        "data/sda: device files",
    ),
    "char-device": (
        _with_special("data/null", tarfile.CHRTYPE),
        Refusal.SPECIAL_FILE,
        "data/null: device files",
    ),
    "fifo": (
        _with_special("data/pipe", tarfile.FIFOTYPE),
        Refusal.SPECIAL_FILE,
        "data/pipe: device files, fifos",
    ),
    "oversized": (
        build_oversized,
        Refusal.TOO_LARGE,
        "MANIFEST.json: total size over the limit (8192 bytes listed; the limit is 4096)",
    ),
    "not-in-manifest": (
        _with_extra("code/extra.py", b"print('hidden')\n", listed=False),
        Refusal.NOT_IN_MANIFEST,
        "code/extra.py: member is not listed in the manifest",
    ),
    "outside-top-dirs": (
        _with_extra("etc/cron.d/job", b"* * * * * root id\n", listed=False),
        Refusal.OUTSIDE_TOP_DIRS,
        "etc/cron.d/job: path is outside code/ and data/",
    ),
    "checksum-mismatch": (
        build_checksum_mismatch,
        Refusal.CHECKSUM_MISMATCH,
        "code/train.py: sha256 does not match",
    ),
    "size-mismatch": (
        build_size_mismatch,
        Refusal.SIZE_MISMATCH,
        "code/train.py: size does not match the manifest",
    ),
    "missing-file": (
        build_missing,
        Refusal.MISSING,
        "data/x.csv: listed in the manifest but missing",
    ),
    "truncated-gzip": (build_truncated, Refusal.CORRUPT, "archive is corrupt or truncated"),
    "not-gzip": (build_not_gzip, Refusal.CORRUPT, "<archive>: archive is corrupt or truncated"),
    "corrupt-deflate": (build_corrupt_deflate, Refusal.CORRUPT, "archive is corrupt or truncated"),
    "garbage-tar": (build_gzip_of_garbage, Refusal.CORRUPT, "archive is corrupt or truncated"),
    "no-manifest": (
        build_no_manifest,
        Refusal.BAD_MANIFEST,
        "MANIFEST.json: manifest is missing or invalid",
    ),
    "file-named-code": (
        _with_conflict(["code", "code/train.py"]),
        Refusal.FILE_DIR_CONFLICT,
        "code: path is both a file and a directory (code/ is always a directory)",
    ),
    "file-then-directory": (
        _with_conflict(["code/a", "code/a/b.py"]),
        Refusal.FILE_DIR_CONFLICT,
        "code/a: path is both a file and a directory (the manifest also lists code/a/b.py)",
    ),
    "directory-then-file": (
        _with_conflict(["code/a/b.py", "code/a"]),
        Refusal.FILE_DIR_CONFLICT,
        "code/a: path is both a file and a directory (the manifest also lists code/a/b.py)",
    ),
    "directory-member-over-a-file": (
        build_directory_over_a_file,
        Refusal.FILE_DIR_CONFLICT,
        "code/train.py/sub: path is both a file and a directory",
    ),
    "junk-after-end-blocks": (
        build_junk_after_the_end_blocks,
        Refusal.TRAILING_DATA,
        "<archive>: data after the end of the archive (non-zero bytes",
    ),
    "second-gzip-member": (
        build_second_gzip_member,
        Refusal.TRAILING_DATA,
        "<archive>: data after the end of the archive (bytes after the end of the gzip",
    ),
    "bytes-after-gzip": (
        build_bytes_after_the_gzip_stream,
        Refusal.TRAILING_DATA,
        "<archive>: data after the end of the archive",
    ),
    "junk-instead-of-end-blocks": (
        build_junk_instead_of_end_blocks,
        Refusal.CORRUPT,
        "not a tar header",
    ),
    "bad-gzip-crc": (build_bad_gzip_crc, Refusal.CORRUPT, "archive is corrupt or truncated"),
    "pax-header-bomb": (
        lambda path: write_header_bomb(path, tarfile.XHDTYPE, 8 * 1024 * 1024),
        Refusal.EXTENDED_HEADER,
        "<archive>: extended tar header over the limit (pax header",
    ),
    "gnu-longname-bomb": (
        lambda path: write_header_bomb(path, tarfile.GNUTYPE_LONGNAME, 8 * 1024 * 1024),
        Refusal.EXTENDED_HEADER,
        "<archive>: extended tar header over the limit (GNU long-name header",
    ),
}


# --------------------------------------------------------------------------- the pod side


def pod_runtime_copy(tmp_path: Path) -> Path:
    """A package root holding the runtime package, as the ConfigMap mounts it (no repo)."""
    root = tmp_path / "tfjob-python"
    (root / "runtime").mkdir(parents=True)
    for source in sorted((REPO / "runtime").glob("*.py")):  # as operators/launch.py ships them
        shutil.copy(source, root / "runtime" / source.name)
    return root


def run_fetch(
    tmp_path: Path, url: str, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    access = tmp_path / "access"
    access.mkdir(parents=True, exist_ok=True)
    (access / "bundle_url").write_text(url + "\n")
    workspace = tmp_path / "workspace"
    env = {
        "PATH": os.environ["PATH"],
        "TFJOB_ACCESS_DIR": str(access),
        "TFJOB_WORKSPACE": str(workspace),
        **(extra_env or {}),
    }
    # The pod's command in the package root, its working directory: `-m` puts that first on
    # the path, so the copy is imported; -s and -E as -I, which would leave it out.
    result = subprocess.run(
        [sys.executable, "-s", "-E", "-m", "runtime.fetch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=pod_runtime_copy(tmp_path),
    )
    return result, workspace
