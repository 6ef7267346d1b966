"""tshell: the TF-on-K8s command line (pack and upload bundles, submit and watch training runs).

Errors: one base (`errors.py`); every command ends one with a message for the
person at the terminal and an exit code (`exitcodes.ExitCode`; the mapping is
`command.run_command`'s):

    TshellError
    ├── CommandError             a command failed; carries its exit code (exitcodes.py)
    ├── ConfigError (ValueError) the configuration is unusable; names the setting (config.py)
    ├── UploadError              an upload failed, or S3 holds other bytes (s3_upload.py)
    ├── ReplicaLogError          the run's pods cannot be read (replica_logs.py)
    └── AirflowClientError       a call to Airflow failed; `detail` is the server's own
        │                        (airflow_client.py)
        ├── AirflowUnreachableError   no answer: is Airflow running, is the URL right?
        ├── AirflowAuthError          login refused: check the user and password
        │   └── AirflowForbiddenError logged in, but not allowed (403)
        ├── AirflowNotFoundError      no such run or DAG (404)
        ├── AirflowRefusedError       the input was refused (400/409/422)
        ├── AirflowServerError        Airflow cannot answer now (502/503/504): ask again
        └── AirflowInternalError      Airflow failed the call (500): report it

Bundle and transfer errors of the shared pod-side code are `runtime`'s
(`BundleError`, `TransferError`).
"""
