#!/usr/bin/env bash
# Screenshots of the run's TFJob tab and of the tenants page for the README and
# docs/pipeline.md: the browser tests (tests/operators/test_run_view_browser.py) save them
# into docs/images/ while they run.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/images
make setup
TFJOB_VIEW_SCREENSHOTS="$PWD/docs/images" .venv/bin/python -m pytest -q -x \
  tests/operators/test_run_view_browser.py -k "running_job or after_the_run or tenants_page"
ls -l docs/images/tfjob-*.jpg docs/images/tenants-*.jpg
