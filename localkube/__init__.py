"""localkube: a Kubernetes-API-compatible local cluster whose kubelet runs pods as real processes.

It imports nothing from the rest of the project. `python -m localkube up|down` is the entry point
(see README.md); the API server lives in `localkube.apiserver`, the scheduler in
`localkube.scheduler` (its pure decision in `localkube.placement`), simulated nodes in
`localkube.hollow` and the kubelet in `localkube.kubelet`. Every error it raises on purpose
is a `localkube.errors.LocalkubeError`; the tree is drawn in localkube/errors.py.
"""
