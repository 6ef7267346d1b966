"""Hollow (simulated) nodes: a kubelet that reports pods without running them.

Nodes declared `simulated: true` in the nodes file are served by one process,
`python -m localkube.hollow`, instead of a kubelet per node: it heartbeats the nodes and moves
their pods through their phases by rules written on the pods (rules.py), through the same HTTP
API and the same state-dir files as the real kubelet, so the API server, scheduler and clients
do their real work while no pod process exists. See localkube/README.md, "Simulated nodes".
"""
