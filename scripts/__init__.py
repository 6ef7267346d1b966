"""The embedded services' scripts: each `scripts/<name>.py` with a `main` runs as
`python scripts/<name>.py` (the Makefile's targets), and they import each other, and the
tests' harness imports them, as `scripts.<module>` (the project is installed editable)."""
