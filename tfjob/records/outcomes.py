"""What the pipeline's steps hand on besides the run and its replicas.

`fetch_bundle` returns the bundle's identity (launch signs its snapshot, run.json
keeps it); `launch` pushes the warm start it staged (train's first attempt starts
at its step, run.json keeps it) and, when it fails, why; archive tells run.json's
`launch` from that failure and launch's `ready_at`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tfjob.records.replicas import Payload


@dataclass(frozen=True)
class BundleIdentity:
    """The bundle `fetch_bundle` checked and copied to the run's snapshot (its return value)."""

    source: str  # the request's bundle URI
    source_etag: str
    snapshot: str  # s3:// URI of the run's own copy, what the pods fetch
    size: int  # bytes of the compressed bundle
    sha256: str
    name: str  # the bundle manifest's
    created: str
    files: int
    total_size: int  # bytes of its files once unpacked

    def to_payload(self) -> Payload:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> BundleIdentity:
        return cls(**payload)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StagedWarmStart:
    """The checkpoints the first gang restores for the request's `warm_start` (launch's XCom)."""

    requested: str  # the request's warm_start: a run id or "latest"
    source: str | None  # s3:// URI of the checkpoints prefix; None when nothing to restore
    step: int | None
    files: int
    bytes: int

    def to_payload(self) -> Payload:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> StagedWarmStart:
        return cls(**payload)  # type: ignore[arg-type]


@dataclass(frozen=True)
class LaunchFailure:
    """Why the launch failed: the error's kind and message (launch's XCom, run.json's `launch`)."""

    error: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> LaunchFailure:
        return cls(error=type(exc).__name__, message=str(exc))

    def to_payload(self) -> dict[str, str]:
        return {"error": self.error, "message": self.message}

    @classmethod
    def from_payload(cls, payload: Mapping[str, str]) -> LaunchFailure:
        return cls(error=payload["error"], message=payload["message"])


class LaunchState(enum.StrEnum):
    """How the launch ended, as run.json says."""

    READY = "ready"
    FAILED = "failed"
    NOT_READY = "not ready"  # killed, or never run


NOT_READY_MESSAGE = "launch did not finish (killed or not run)"


@dataclass(frozen=True)
class LaunchOutcome:
    """run.json's `launch`: ready (with the time), failed (with why), or neither."""

    state: LaunchState
    ready_at: float | None = None  # launch's `ready_at` XCom (time.time())
    failure: LaunchFailure | None = None

    @classmethod
    def judge(cls, failure: LaunchFailure | None, ready_at: float | None) -> LaunchOutcome:
        """The outcome from launch's XComs: a failure wins, then a ready time."""
        if failure is not None:
            return cls(LaunchState.FAILED, failure=failure)
        if ready_at is not None:
            return cls(LaunchState.READY, ready_at=ready_at)
        return cls(LaunchState.NOT_READY)

    def to_payload(self) -> Payload:
        if self.state is LaunchState.FAILED and self.failure is not None:
            return {"state": self.state.value, **self.failure.to_payload()}
        if self.state is LaunchState.READY:
            return {"state": self.state.value, "ready_at": self.ready_at}
        return {"state": self.state.value, "message": NOT_READY_MESSAGE}

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> LaunchOutcome:
        state = LaunchState(payload["state"])
        if state is LaunchState.FAILED:
            failure = LaunchFailure(str(payload["error"]), str(payload["message"]))
            return cls(state, failure=failure)
        if state is LaunchState.READY:
            return cls(state, ready_at=payload["ready_at"])  # type: ignore[arg-type]
        return cls(state)
