"""Airflow's scheduler, started with the training tasks' modules already imported.

Why this exists: every task process is forked from the scheduler (the
LocalExecutor's workers are its children) and parses its DAG file first;
imported here once, the DAG files' and the steps' modules come to every task
process with the fork instead of being imported again per task
(operators/preload.py). Everything else is `airflow scheduler` itself.

Usage: python -m scripts.airflow_scheduler [airflow scheduler's options]
"""

from __future__ import annotations

import sys

from airflow.__main__ import main as airflow_main

from operators.preload import preload_task_modules


def main(argv: list[str]) -> None:
    preload_task_modules()
    sys.argv = ["airflow", "scheduler", *argv]
    airflow_main()


if __name__ == "__main__":
    main(sys.argv[1:])
