"""The pure core of TF-on-K8s: request model, naming, ClusterSpec, manifests.

Everything here is data in, data out: no Airflow, no network, no disk (the one
exception is `load_request`, which reads the request file it is given).
"""
