"""The localkube kubelet: runs the pods bound to one node as real processes.

Each pod gets its own network namespace and IP on a shared bridge, each
container its own mount, uts, ipc and pid namespaces and cgroups; see
localkube/README.md ("Internals") for the contract with the API server.
"""
