"""The localkube API server: an aiohttp application speaking the Kubernetes core/v1 REST API.

Modules are split by what they hold: `store` (objects, resourceVersions, persistence, watch
fan-out), `resources` (the kinds served), `operations` (the verbs on objects, shared by the
HTTP layer and the controllers), `validation` (an object's kind, name and pod spec checked),
`routes` (URL parsing, query options, JSON in and out, watch streams), `discoveryroutes`
(discovery, health and not-served paths), `selectors`, `patch`, `defaults`, `admission`,
`podsecurity` (the Pod Security Standards; its checks in `podsecurity_checks`), `quantity`,
`gc`, `nodelifecycle` (nodes whose kubelet went silent), `discovery`, `tables` (server-side
printing), `podlogs`, `podexec`, `authentication` (the bearer token), `requestcount`,
`outage` (the 503 test switch), `errors` and `app` (wiring and the process main; `__main__`
its entry point). The scheduler beside it is `localkube.scheduler`, its decision
`localkube.placement`.
Every refusal is an `errors.ApiError` (a `localkube.errors.LocalkubeError`), answered as a Status.
"""
