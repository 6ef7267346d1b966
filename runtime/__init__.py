"""The pod side of TF-on-K8s (standard library only).

The package is shipped to every pod in a ConfigMap, mounted below the containers'
working directory; the entry modules run as `python3 -m runtime.fetch` (and
`runtime.bootstrap`, `runtime.keeper`), and every module imports its siblings as
`runtime.<module>`, in the pod as on the host.

Errors: one base (`errors.py`); the entry scripts turn each into an exit code
of the pod protocol (`protocol.py`), and tshell and Airflow catch them when
they use the bundle and transfer code on the host:

    PodError
    ├── BundleError      a bundle refused (or not written): the member and the reason
    │                    (bundleformat.py; fetch exits EXIT_FETCH_REFUSED)
    ├── TransferError    a download or upload failed for good; `transient` says whether
    │                    trying again may help (transfer.py)
    ├── RestoreRefused   restore.json, or a file it lists, refused (checkpoints.py)
    └── PathRefused      a path the keeper does not serve (keeper.py; EXIT_KEEPER_REFUSED)

`checkpoint_sync.PassStopped` is no error: it ends a sync pass early, inside that module.
"""
