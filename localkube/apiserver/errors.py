"""Kubernetes `Status` errors with the codes and reasons a real API server returns.

Clients branch on `code` and `reason` (the python client raises ApiException(status=...), kubectl
prints `message`), so every refusal the server makes goes through `ApiError`.
"""

from __future__ import annotations

from typing import Any

from localkube.errors import LocalkubeError


class ApiError(LocalkubeError):
    """A refusal of the API server, answered to the client as a v1 Status object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def to_status(self) -> dict[str, Any]:
        return status_object(
            "Failure",
            code=self.code,
            reason=self.reason,
            message=self.message,
            details=self.details,
        )


def status_object(
    status: str, code: int = 200, reason: str = "", message: str = "", details: dict | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status}
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _details(resource: str, name: str, group: str = "") -> dict:
    details = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', _details(resource, name))


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{resource} "{name}" already exists', _details(resource, name)
    )


def conflict(resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": {why}',
        _details(resource, name),
    )


def stale_version(resource: str, name: str) -> ApiError:
    return conflict(
        resource,
        name,
        "the object has been modified; please apply your changes "
        "to the latest version and try again",
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid; causes are (field, message) pairs, worded like the real validation."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    details = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
    }
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details)


def unauthorized() -> ApiError:
    """401: no bearer token, or not the cluster's (worded as kube-apiserver words it)."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        403, "Forbidden", f'{resource} "{name}" is forbidden: {why}', _details(resource, name)
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types "
        f"include: application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json (given: {content_type!r})",
    )
