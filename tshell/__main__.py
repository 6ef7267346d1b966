"""`python -m tshell` and the `tshell` console script."""

from __future__ import annotations

import sys

from tshell.cli import run


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
