"""An Airflow component started with what its forked children import already imported.

Why this exists: every task process is forked from the scheduler (the
LocalExecutor's workers are its children) and parses its DAG file first, and
the triggerer forks the runner that imports the training trigger at the first
wait. Imported here once, before they fork, the DAG files', the steps' and the
trigger's modules come to every child with the fork instead of being imported
again by each (operators/preload.py). Everything else is `airflow <component>`.

Usage: python -m scripts.airflow_preloaded scheduler|triggerer [the component's options]
"""

from __future__ import annotations

import sys

from airflow.__main__ import main as airflow_main

from operators.preload import PRELOADS, preload_modules


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in PRELOADS:
        sys.exit(f"usage: airflow_preloaded {'|'.join(PRELOADS)} [options]")
    preload_modules(argv[0])
    sys.argv = ["airflow", *argv]
    airflow_main()


if __name__ == "__main__":
    main(sys.argv[1:])
