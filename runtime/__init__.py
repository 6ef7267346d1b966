"""The pod side of TF-on-K8s (standard library only).

These files are shipped flat to every pod in a ConfigMap; the entry scripts
(`fetch.py`, `bootstrap.py`) import their siblings by flat name, the host
imports them as `runtime.<module>`.
"""
