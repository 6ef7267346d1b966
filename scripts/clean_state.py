"""Remove the local S3's kept buckets and objects: `make clean-state`.

    python scripts/clean_state.py [--state-dir .state] [--yes]

Why this exists: the local S3 keeps everything it acknowledged under
<state>/s3/data (scripts/s3_store.py), so `make down` and `make up` no longer
start from an empty S3. This is the one way back to an empty one.

It removes <state>/s3/data and nothing else: the S3 server's log and
ready file, localkube's store (<state>/localkube), Airflow's home
(<state>/airflow) and its database (<state>/postgres) stay. It refuses while
an S3 server uses that data (it holds the store's lock), and asks before
removing unless --yes is given (`make clean-state YES=1`); an answer other
than y/yes, or none (stdin closed), removes nothing and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.s3_store import StoreError, locate_data_dir  # noqa: E402
from scripts.s3_store_upkeep import find_store_holder, measure_store, remove_store  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE_DIR = REPO_ROOT / ".state"
MAX_ANSWER_CHARS = 16


def describe_bytes(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    value, unit = size / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def ask_to_confirm(question: str) -> bool:
    print(question, end=" ", flush=True)
    answer = sys.stdin.readline(MAX_ANSWER_CHARS)
    if not answer:
        print()
    return answer.strip().lower() in ("y", "yes")


def clean_state(state_dir: Path, yes: bool) -> int:
    data = locate_data_dir(state_dir / "s3")
    if not data.exists():
        print(f"nothing to remove: no S3 data in {data}")
        return 0
    holder = find_store_holder(data)
    if holder is not None:
        print(
            f"error: an S3 server (pid {holder or '?'}) is using {data}; stop it first (make down)",
            file=sys.stderr,
        )
        return 1
    size = measure_store(data)
    print(
        f"This removes the local S3's data in {data}: {size.buckets} buckets, "
        f"{size.objects} objects, {describe_bytes(size.data_bytes)}.\n"
        f"Nothing else is removed ({state_dir / 's3' / 'server.log'}, "
        f"{state_dir / 'localkube'}, {state_dir / 'airflow'} and {state_dir / 'postgres'} stay)."
    )
    if not yes and not ask_to_confirm("Remove it? [y/N]"):
        print("nothing removed (confirm with y, or pass --yes: make clean-state YES=1)")
        return 1
    try:
        remove_store(data)
    except StoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"removed {data}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--yes", action="store_true", help="remove without asking")
    args = parser.parse_args(argv)
    return clean_state(args.state_dir, args.yes)


if __name__ == "__main__":
    sys.exit(main())
