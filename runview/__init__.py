"""The web UI's API: the TFJob tab of a DAG run and the tenants page, mounted at /tfjob.

Why this is its own package: only the plugin (plugins/tfjob_plugin.py) uses it, and
it reads what the pipeline wrote (XComs, S3, Kubernetes) without being a step of it.
It imports operators, tenancy, tfjob and runtime; nothing imports it but the plugin.
One error base (`errors.py`); each route turns an error into its HTTP status:

    RunViewError
    ├── LogRequestError (ValueError)   the tab's log query breaks a rule: 400 (logs.py)
    └── RunFilesError                  a run's files cannot be served (files.py):
        ├── RunFilePathError            400 a bad path,
        ├── RunFileNotFoundError        404 no such file,
        ├── RunNotArchivableError       404 a run with nothing archived,
        └── RunStorageError             502 S3 failed
"""
