"""The pure core of TF-on-K8s: request model, naming, ClusterSpec, manifests.

Everything here is data in, data out: no Airflow, no network, no disk (the one
exception is `load_request`, which reads the request file it is given).

Errors: every error tfjob raises says an input is wrong and nothing was done;
the caller corrects the input the message names and tries again. One base
(`errors.py`), a ValueError, so `except ValueError` callers keep working:

    TfjobError (ValueError)
    ├── RequestError         a request field: where, what was given, what is allowed
    │                        (tfjob/request/errors.py; `load_request`, the submit form)
    ├── TenantPolicyError    a valid request its tenant may not run: bundle or output
    │                        prefix, image, node selector, toleration (tfjob/tenants/policy.py)
    ├── TenantsFileError     the tenants file: file, place, given, allowed (tfjob/tenants/model.py)
    ├── UnknownTenantError   a request names a tenant the tenants file lacks; an
    │                        administrator adds it (tfjob/tenants/model.py)
    ├── ClusterSpecError     endpoints that cannot form the requested ClusterSpec
    │                        (clusterspec.py)
    ├── RestoreTooLarge      checkpoints over what a pod may restore (checkpoints.py)
    ├── TFJobRefused         a Kubeflow TFJob that cannot run here: every field's path,
    │                        given, supported (kubeflow/errors.py)
    └── S3UrlError           not an s3://<bucket>/<key> URL (s3url.py)
"""
