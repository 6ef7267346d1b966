"""Entry point of `python -m localkube.apiserver` (started by `python -m localkube up`)."""

from localkube.apiserver.app import main

if __name__ == "__main__":
    raise SystemExit(main())
