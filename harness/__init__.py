"""The test harness: the worlds the end-to-end tests and the benchmarks run in.

Why this exists: tests/ and bench/ both start the same local S3, localkube,
PostgreSQL and Airflow; as an installed package they import one copy of that
code by name instead of putting tests/ on sys.path. The `*_fixtures` modules
that define pytest fixtures are registered as plugins in tests/conftest.py.
"""
