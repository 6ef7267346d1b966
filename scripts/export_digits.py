"""Export scikit-learn's bundled digits into the example bundles' data/ folders.

Why this exists: pods and CI have no internet, so `keras.datasets` cannot
download anything; scikit-learn ships the 1797 8x8 digits inside its wheel.
This script is how every `bundles/<name>/data/digits.npz` was made, and the
bundle tests check that the committed files still match its output.

The file is a plain `.npz` (NumPy zip) with four arrays:
`x_train`, `x_test` (float32, shape (n, 64), scaled to [0, 1]) and
`y_train`, `y_test` (int64 labels 0..9). The split is fixed (stratified,
seeded), and the archive is written byte-for-byte reproducibly (fixed zip
timestamps), so a bundle's sha256 does not change when the data is re-exported.

Usage: python scripts/export_digits.py [--out DIR ...] [--check]
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_BUNDLES = ("digits-single", "digits-ps", "digits-mwms", "digits-tf1", "digits-tf1-flags")
DEFAULT_OUTPUT_DIRS = tuple(REPO_ROOT / "bundles" / name / "data" for name in EXAMPLE_BUNDLES)
DATA_FILE_NAME = "digits.npz"
TEST_FRACTION = 0.2
SPLIT_SEED = 20261202
PIXEL_MAX = 16.0  # sklearn's digits hold pixel intensities 0..16
ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can hold: stable bytes


def split_digits() -> dict[str, np.ndarray]:
    """Return the fixed train/test split of the digits, pixels scaled to [0, 1]."""
    digits = load_digits()
    features = (digits.data / PIXEL_MAX).astype(np.float32)
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        features, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def encode_npz(arrays: dict[str, np.ndarray]) -> bytes:
    """Encode arrays as a compressed .npz whose bytes depend only on the arrays."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            member = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_TIMESTAMP)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.external_attr = 0o644 << 16
            array_bytes = io.BytesIO()
            np.lib.format.write_array(array_bytes, arrays[name], allow_pickle=False)
            archive.writestr(member, array_bytes.getvalue(), compresslevel=9)
    return buffer.getvalue()


def export_digits(output_dirs: list[Path]) -> list[Path]:
    """Write digits.npz into every output dir (created if missing); return the files."""
    payload = encode_npz(split_digits())
    written = []
    for output_dir in output_dirs:
        output_dir.mkdir(parents=True, exist_ok=True)
        target = output_dir / DATA_FILE_NAME
        target.write_bytes(payload)
        written.append(target)
    return written


def holds_arrays(path: Path, expected: dict[str, np.ndarray]) -> bool:
    """Tell whether the .npz at path holds exactly the expected arrays."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if sorted(stored.files) != sorted(expected):
                return False
            return all(
                stored[name].dtype == array.dtype and np.array_equal(stored[name], array)
                for name, array in expected.items()
            )
    except (OSError, ValueError, zipfile.BadZipFile):
        return False


def find_stale_exports(output_dirs: list[Path]) -> list[Path]:
    """Return the data files that are missing or hold other arrays than a fresh export.

    Arrays are compared, not bytes: another zlib build may compress differently.
    """
    expected = split_digits()
    return [
        output_dir / DATA_FILE_NAME
        for output_dir in output_dirs
        if not holds_arrays(output_dir / DATA_FILE_NAME, expected)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        action="append",
        type=Path,
        help="data/ folder to write into (repeatable); default: every example bundle",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any file is stale"
    )
    options = parser.parse_args(argv)
    output_dirs = options.out or list(DEFAULT_OUTPUT_DIRS)
    if options.check:
        stale = find_stale_exports(output_dirs)
        for path in stale:
            print(f"stale or missing: {path} (run scripts/export_digits.py)", file=sys.stderr)
        return 1 if stale else 0
    for path in export_digits(output_dirs):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
