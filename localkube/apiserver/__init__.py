"""The localkube API server: an aiohttp application speaking the Kubernetes core/v1 REST API.

Modules are split by what they hold: `store` (objects, resourceVersions, persistence,
watch fan-out),
`resources` (the kinds served), `selectors`, `patch`, `defaults`, `admission`, `gc`, `discovery`,
`errors`, `podlogs`, `podexec`, `handlers` (the REST verbs) and `app` (wiring and the process main).
Every refusal is an `errors.ApiError` (a `localkube.errors.LocalkubeError`), answered as a Status.
"""
