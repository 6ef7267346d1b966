"""Where the checkout is, for tests that reach its scripts/, bundles/, docs/ and runtime/.

Why this exists: the tests live one or two folders below tests/ (tests/<package>/),
so a path computed from each file's own place breaks when a file moves. Import
`REPO_ROOT` from here instead (`from harness.repo_root import REPO_ROOT`).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
