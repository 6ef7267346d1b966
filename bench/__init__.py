"""The benchmarks: `python bench/run_all.py` runs them (docs in bench/README.md); each
`bench/bench_<name>.py` runs as a script too. They import each other, and the tests import
their report and statistics code, as `bench.<module>`."""
