"""Entry point of `python -m localkube`."""

from localkube.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
