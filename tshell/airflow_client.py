"""A logged-in session with the Airflow REST API, for the tshell run commands.

Why this exists: apache-airflow-client has no token helper. Airflow 3 wants a
JWT from ``POST /auth/token`` as a bearer token, valid for a limited time. This
module fetches it, refreshes it shortly before it expires and once more when
the server rejects it anyway (401/403: a restarted Airflow with a new secret), and
turns transport and HTTP failures into errors a person can act on:

    AirflowClientError              any failed call (other 4xx)
    ├── AirflowUnreachableError     no answer: not running, wrong URL, timeout
    ├── AirflowAuthError            the login was refused, or 401 with a fresh token
    │   └── AirflowForbiddenError   403 with a fresh token: the user's roles do not grant it
    ├── AirflowNotFoundError        404: no such DAG, run or task
    ├── AirflowRefusedError         400/409/422: the server refused the input
    ├── AirflowServerError          502/503/504: Airflow, or a proxy before it, cannot answer
    │                               now; a call safe to repeat may be asked again
    └── AirflowInternalError        500 (or another 5xx): Airflow failed the call; asking
                                    again would fail the same way, so it is reported at once

Only what a real network or proxy needs is worth asking again: no answer
(AirflowUnreachableError) and 502/503/504 (AirflowServerError); the commands
that follow a run do (run_commands.call_patiently), and so does the login.
With Airflow's metadata in PostgreSQL a 500 is a real server error, not a
lock wait, and its message carries the server's detail.

With the FAB auth manager each tenant's roles grant its own DAGs, so a 403 is
an answer about the user, not the token: the commands word it (tshell/runs/lookup.py).

Importing apache-airflow-client costs seconds (it loads every API module), so
reads go through `get_json` (and `post_json`, for the one read that is a POST)
on the standard library, and the generated client is imported only by the
commands that write (trigger, patch). A JSON answer is read up to
MAX_JSON_BYTES; a file the /tfjob API serves is read by the caller, in chunks,
from `open_stream`.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.backoff import BackoffPolicy, retry
from tfjob.jsontypes import JsonObject
from tshell.config import AirflowConfig
from tshell.errors import TshellError

if TYPE_CHECKING:
    import airflow_client.client as airflow_api

T = TypeVar("T")
TOKEN_PATH = "/auth/token"
# The wait for each answer; longer is a hung server or a lost connection (AirflowUnreachableError).
REQUEST_TIMEOUT_S = 60.0
# A proxy that cannot reach Airflow (502, 504) or a server not ready or shedding load (503).
UNAVAILABLE_STATUSES = (502, 503, 504)
# Airflow answers 401 without a token and 403 "Invalid JWT token" for a bad or expired one.
TOKEN_REJECTED = (401, 403)
# Refresh this long before the token's own expiry, so no call races it.
TOKEN_REFRESH_MARGIN_S = 60.0
# The largest JSON answer read (a run's file listing is at most 10,000 entries, ~2 MiB).
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024  # an error's detail is a line or a validation list


class AirflowClientError(TshellError):
    """A failure of a call to Airflow, worded for the person at the terminal; `detail` is
    the server's own `detail` line, when it answered one."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class AirflowUnreachableError(AirflowClientError):
    pass


class AirflowAuthError(AirflowClientError):
    pass


class AirflowForbiddenError(AirflowAuthError):
    """The user is logged in but may not do this (HTTP 403 with a fresh token)."""


class AirflowNotFoundError(AirflowClientError):
    pass


class AirflowRefusedError(AirflowClientError):
    """The server refused the input (400/409/422); the message carries its detail."""


class AirflowServerError(AirflowClientError):
    """Airflow, or a proxy before it, cannot answer now (HTTP 502/503/504); a call that is
    safe to repeat may be asked again."""


class AirflowInternalError(AirflowClientError):
    """Airflow failed the call (HTTP 500, or a 5xx other than 502/503/504): a real server
    error, reported at once; the message carries the server's detail."""


def classify_server_failure(status: int) -> type[AirflowClientError]:
    """The error for a 5xx: worth asking again (502/503/504) or a real failure (the rest)."""
    return AirflowServerError if status in UNAVAILABLE_STATUSES else AirflowInternalError


def describe_api_detail(body: str | bytes | None) -> str:
    """The server's `detail` as one readable line, field names included."""
    if not body:
        return "(no detail)"
    try:
        detail = json.loads(body).get("detail", body)
    except (ValueError, AttributeError):
        return body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    if isinstance(detail, list):  # FastAPI validation errors: [{"loc": [...], "msg": ...}]
        parts = []
        for item in detail:
            location = ".".join(str(p) for p in item.get("loc", []) if p != "body")
            parts.append(
                f"{location}: {item.get('msg', item)}" if location else str(item.get("msg"))
            )
        return "; ".join(parts)
    if isinstance(detail, dict):
        return json.dumps(detail)
    # Param validation errors continue with the whole JSON schema; the first line names the field.
    return str(detail).strip().splitlines()[0] if str(detail).strip() else "(no detail)"


def read_token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (seconds since the epoch), read without verifying it."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, KeyError, ValueError, TypeError):
        return None


TOKEN_ATTEMPTS = 3
# A login is safe to repeat: asked again after 2 s, then 4 s.
TOKEN_BACKOFF = BackoffPolicy(first_delay=2.0, attempts=TOKEN_ATTEMPTS)


@retry(TOKEN_BACKOFF, on=(AirflowUnreachableError, AirflowServerError))
def fetch_token(config: AirflowConfig, timeout: float = REQUEST_TIMEOUT_S) -> str:
    """A fresh access token for config's user; asked again when no answer comes or the
    answer is 502/503/504."""
    return request_token(config, timeout)


def request_token(config: AirflowConfig, timeout: float) -> str:
    body = json.dumps({"username": config.username, "password": config.password}).encode()
    request = urllib.request.Request(
        config.url + TOKEN_PATH, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["access_token"]
    except urllib.error.HTTPError as error:
        if error.code in (400, 401, 403):
            raise AirflowAuthError(
                f"Airflow at {config.url} refused the login of user {config.username!r} "
                f"(HTTP {error.code}): check TSHELL_USERNAME/TSHELL_PASSWORD or the config file"
            ) from None
        failure = classify_server_failure(error.code) if error.code >= 500 else AirflowClientError
        raise failure(
            f"Airflow at {config.url} answered HTTP {error.code} to {TOKEN_PATH}: "
            f"{describe_api_detail(error.read(MAX_ERROR_BYTES))}"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise AirflowUnreachableError(
            f"Airflow is not reachable at {config.url} ({reason}); is it running "
            f"(`make up`), or set TSHELL_AIRFLOW_URL"
        ) from None


class AirflowSession:
    """Calls to one Airflow with a bearer token that is kept valid."""

    def __init__(self, config: AirflowConfig, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.config = config
        self.timeout = timeout
        self._token: str | None = None
        self._token_expiry: float | None = None
        self._api: airflow_api.ApiClient | None = None

    @property
    def url(self) -> str:
        return self.config.url

    def token(self) -> str:
        """The current token, fetched or refreshed when needed."""
        expiring = (
            self._token_expiry is not None
            and self._token_expiry - time.time() < TOKEN_REFRESH_MARGIN_S
        )
        if self._token is None or expiring:
            self.refresh_token()
        assert self._token is not None
        return self._token

    def refresh_token(self) -> None:
        self._token = fetch_token(self.config, self.timeout)
        self._token_expiry = read_token_expiry(self._token)
        if self._api is not None:
            self._api.configuration.access_token = self._token

    def api_client(self) -> airflow_api.ApiClient:
        token = self.token()
        if self._api is None:
            import airflow_client.client as airflow_api

            configuration = airflow_api.Configuration(host=self.config.url, access_token=token)
            configuration.retries = 1
            self._api = airflow_api.ApiClient(configuration)
        return self._api

    def call(self, operation: Callable[[airflow_api.ApiClient], T], what: str = "") -> T:
        """Run `operation` with the generated client; a rejected token is replaced once."""
        import urllib3
        from airflow_client.client.exceptions import ApiException

        for attempt in (1, 2):
            try:
                return operation(self.api_client())
            except ApiException as error:
                if error.status in TOKEN_REJECTED and attempt == 1:
                    self.refresh_token()
                    continue
                raise self.describe_http_error(error.status, error.body, what) from None
            except urllib3.exceptions.HTTPError as error:
                raise self.unreachable(error.__class__.__name__) from None
        raise AssertionError("unreachable")

    def unreachable(self, reason: object) -> AirflowUnreachableError:
        return AirflowUnreachableError(
            f"Airflow is not reachable at {self.config.url} ({reason}); is it running "
            f"(`make up`), or set TSHELL_AIRFLOW_URL"
        )

    def describe_http_error(
        self, status: int, body: str | bytes | None, what: str
    ) -> AirflowClientError:
        detail = describe_api_detail(body)
        subject = f"{what}: " if what else ""
        if status == 404:
            return AirflowNotFoundError(
                f"{subject}not found on {self.config.url} ({detail})", detail
            )
        if status in (401, 403):
            # Asked after a fresh token: a 403 now is about the user's roles, not the token.
            failure = AirflowForbiddenError if status == 403 else AirflowAuthError
            return failure(
                f"{subject}user {self.config.username!r} is not allowed (HTTP {status}: {detail})"
            )
        if status in (400, 409, 422):
            return AirflowRefusedError(f"{subject}Airflow refused it (HTTP {status}): {detail}")
        if status >= 500:
            failure = classify_server_failure(status)
            return failure(f"{subject}Airflow answered HTTP {status}: {detail}", detail)
        return AirflowClientError(f"{subject}Airflow answered HTTP {status}: {detail}")

    def get_json(self, path: str, params: JsonObject | None = None) -> Any:
        """GET a REST API path (query `params` may hold lists); the decoded JSON answer."""
        return self.send_json("GET", path, params)

    def post_json(self, path: str, body: Any) -> Any:
        """POST `body` as JSON to a REST API path that reads (e.g. dagRuns/list); its answer."""
        return self.send_json("POST", path, data=json.dumps(body).encode())

    def send_json(
        self,
        method: str,
        path: str,
        params: JsonObject | None = None,
        data: bytes | None = None,
    ) -> Any:
        """One call on the standard library; its JSON answer, read up to MAX_JSON_BYTES."""
        with self.send(method, path, params, data, accept="application/json") as response:
            try:
                body = response.read(MAX_JSON_BYTES + 1)
            except (http.client.HTTPException, OSError) as error:
                raise self.unreachable(error.__class__.__name__) from None
        if len(body) > MAX_JSON_BYTES:
            raise AirflowClientError(
                f"{path}: Airflow at {self.config.url} answered more than "
                f"{MAX_JSON_BYTES} bytes of JSON; tshell reads no more"
            )
        return json.loads(body)

    @contextlib.contextmanager
    def open_stream(
        self, path: str, params: JsonObject | None = None
    ) -> Iterator[http.client.HTTPResponse]:
        """GET `path` for its bytes (a file the /tfjob API serves); read them in chunks."""
        with self.send("GET", path, params, accept="application/octet-stream") as response:
            yield response

    def send(
        self,
        method: str,
        path: str,
        params: JsonObject | None = None,
        data: bytes | None = None,
        accept: str = "application/json",
    ) -> http.client.HTTPResponse:
        """The open response of one call; a rejected token is replaced once, failures named."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            request = urllib.request.Request(
                f"{self.config.url}{path}" + (f"?{query}" if query else ""),
                data=data,
                method=method,
                headers=headers | {"Authorization": f"Bearer {self.token()}"},
            )
            try:
                return urllib.request.urlopen(request, timeout=self.timeout)
            except urllib.error.HTTPError as error:
                if error.code in TOKEN_REJECTED and attempt == 1:
                    self.refresh_token()
                    continue
                detail = error.read(MAX_ERROR_BYTES)
                raise self.describe_http_error(error.code, detail, path) from None
            except (urllib.error.URLError, OSError) as error:
                raise self.unreachable(getattr(error, "reason", error)) from None
        raise AssertionError("unreachable")
