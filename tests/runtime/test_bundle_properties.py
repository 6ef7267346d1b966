"""verify_bundle and extract_bundle agree on every archive, and extraction stays inside.

Hypothesis builds archives from a small pool of member names (so duplicates
and file/directory conflicts are common), with `..`, absolute paths pointing
next to the destination, links, fifos and directories, under a manifest that
matches, mismatches or is missing, and sometimes with data after the archive.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runtime.bundle import MANIFEST_NAME, BundleError, extract_bundle, verify_bundle

ESCAPE = "@SANDBOX@"  # replaced by the test's own directory: absolute names that would escape

# Mostly well-formed names from a tiny alphabet: `code/a` and `code/a/b` collide often.
plain_names = st.tuples(
    st.sampled_from(["code", "data"]),
    st.lists(st.sampled_from(["a", "b", "x.py"]), min_size=1, max_size=2),
).map(lambda parts: "/".join([parts[0], *parts[1]]))
odd_names = st.one_of(
    st.lists(st.sampled_from(["code", "data", "a", "..", ".", ""]), min_size=1, max_size=4).map(
        "/".join
    ),
    st.sampled_from(
        ["code", "data", f"{ESCAPE}/parent/escaped.txt", "code/../../escaped.txt", "code/a/"]
    ),
)
names = st.integers(0, 7).flatmap(lambda pick: odd_names if pick == 0 else plain_names)
kinds = st.sampled_from(["file"] * 12 + ["dir", "dir", "symlink", "hardlink", "fifo"])
member = st.tuples(names, kinds, st.binary(max_size=40))
manifest_mode = st.sampled_from(["exact", "exact", "exact", "missing", "drop", "extra", "resize"])
trailer = st.sampled_from(["none", "none", "none", "junk", "gzip-member", "bytes", "zeros"])


def build_archive(
    path: Path, members: list[tuple[str, str, bytes]], mode: str, tail: str, sandbox: str
) -> None:
    members = [(name.replace(ESCAPE, sandbox), kind, body) for name, kind, body in members]
    files = {name: body for name, kind, body in members if kind == "file"}
    listed = {
        p: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in files.items()
    }
    if mode == "drop" and listed:
        listed.pop(sorted(listed)[0])
    elif mode == "extra":
        listed["code/never-packed.py"] = {"size": 1, "sha256": hashlib.sha256(b"1").hexdigest()}
    elif mode == "resize" and listed:
        listed[sorted(listed)[0]]["size"] += 1
    manifest = json.dumps(
        {
            "format_version": 1,
            "name": "prop",
            "created": "2026-12-03T00:00:00Z",
            "files": [{"path": p, **entry} for p, entry in listed.items()],
            "total_size": sum(entry["size"] for entry in listed.values()),
        }
    ).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if mode != "missing":
            add(tar, MANIFEST_NAME, "file", manifest)
        for name, kind, body in members:
            add(tar, name, kind, body)
    data = buffer.getvalue()
    if tail == "junk":
        data += b"junk"
    elif tail == "zeros":
        data += bytes(4096)
    compressed = gzip.compress(data)
    if tail == "gzip-member":
        compressed += gzip.compress(b"more")
    elif tail == "bytes":
        compressed += b"\x01"
    path.write_bytes(compressed)


def add(tar: tarfile.TarFile, name: str, kind: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    if kind == "file":
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        return
    info.type = {
        "dir": tarfile.DIRTYPE,
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "fifo": tarfile.FIFOTYPE,
    }[kind]
    info.linkname = "../../../etc/passwd" if kind == "symlink" else "code/a"
    tar.addfile(info)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its content (None for directories)."""
    found: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = None
        for name in filenames:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, root)] = Path(full).read_bytes()
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(member, max_size=6), manifest_mode, trailer)
def test_verify_accepts_exactly_what_extract_extracts_and_nothing_escapes(
    members: list[tuple[str, str, bytes]], mode: str, tail: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="bundle-prop-") as sandbox:
        parent = Path(sandbox) / "parent"
        dest = parent / "dest"
        (dest / "code").mkdir(parents=True)
        (dest / "code" / "previous.py").write_bytes(b"kept")
        (parent / "neighbour.txt").write_bytes(b"untouched")
        archive = Path(sandbox) / "bundle.tar.gz"
        build_archive(archive, members, mode, tail, sandbox)
        outside_before = {k: v for k, v in tree(Path(sandbox)).items() if "dest" not in k}
        dest_before = tree(dest)

        try:
            manifest = verify_bundle(archive)
            verified: str | None = None
        except BundleError as exc:
            verified = str(exc)
        try:
            extracted_manifest = extract_bundle(archive, dest)
            extracted: str | None = None
        except BundleError as exc:
            extracted = str(exc)

        event("accepted" if verified is None else verified.split(":")[2].split("(")[0].strip())
        assert verified == extracted  # both accept, or both refuse with one message
        outside_after = {k: v for k, v in tree(Path(sandbox)).items() if "dest" not in k}
        assert outside_after == outside_before
        if verified is None:
            assert extracted_manifest == manifest
            written = {k: v for k, v in tree(dest).items() if v is not None}
            assert written == {
                f.path: next(b for n, k, b in reversed(members) if n == f.path and k == "file")
                for f in manifest.files
            }
        else:
            assert tree(dest) == dest_before
