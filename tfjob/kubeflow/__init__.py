"""Kubeflow `kubeflow.org/v1` TFJob manifests read and converted into training requests.

Pure core, like the rest of tfjob/: text in, a `TrainingRequest` (and the notes a person
should read) out; no I/O. `manifest.py` reads a TFJob into typed records and refuses every
field it does not know, naming its path; `convert.py` maps those records onto the request
and refuses what does not map; docs/kubeflow.md is the field-by-field guide.

Errors (one base, tfjob's `TfjobError`):

    TfjobError (ValueError)
    └── TFJobRefused    the manifest, or part of it, cannot run here; carries every
                        `Refusal(path, given, allowed)` found (errors.py)
"""
