"""The localkube kubelet: runs the pods bound to one node as real processes.

Each pod gets its own network namespace and IP on a shared bridge, each
container its own mount, uts, ipc and pid namespaces and cgroups; see
localkube/README.md ("Internals") for the contract with the API server and
localkube/kubelet/README.md for its modules. Its errors derive from
`errors.KubeletError` (the tree is drawn in localkube/errors.py).
"""
