"""What the pipeline's steps hand on besides the run and its replicas.

`fetch_bundle` returns the bundle's identity (launch signs its snapshot, run.json
keeps it); `launch` pushes the warm start it staged (train's first attempt starts
at its step, run.json keeps it) and, when it fails, why; archive tells run.json's
`launch` from that failure and launch's `ready_at`, and returns what it kept (the
model publish moves `latest` to); publish returns what it did to `latest`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tfjob.jsontypes import JsonObject
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


@dataclass(frozen=True)
class ModelRecovery:
    """The copy of a model out of its owner pod when the upload failed (archive's)."""

    pod: str
    reason: str
    error: str | None = None  # the copy failed: the model may be incomplete
    files: int | None = None  # the copy's, when it did not fail
    bytes: int | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {"pod": self.pod, "reason": self.reason}
        if self.error is not None:
            payload["error"] = self.error
        else:
            payload["files"] = self.files
            payload["bytes"] = self.bytes
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> ModelRecovery:
        return cls(**payload)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ModelSummary:
    """The run's model as archive found it: run.json's `model`, archive's XCom."""

    uri: str  # s3:// URI of the run's model folder
    objects: int
    bytes: int = 0
    recovered_from_pod: bool = False
    recovery: ModelRecovery | None = None  # None: no copy out of the pod was tried

    def to_payload(self) -> Payload:
        payload: Payload = {
            "uri": self.uri,
            "objects": self.objects,
            "bytes": self.bytes,
            "recovered_from_pod": self.recovered_from_pod,
        }
        if self.recovery is not None:
            payload["recovery"] = self.recovery.to_payload()
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> ModelSummary:
        recovery = payload.get("recovery")
        return cls(
            uri=str(payload["uri"]),
            objects=int(payload.get("objects") or 0),  # type: ignore[call-overload]
            bytes=int(payload.get("bytes") or 0),  # type: ignore[call-overload]
            recovered_from_pod=bool(payload.get("recovered_from_pod")),
            recovery=ModelRecovery.from_payload(recovery) if recovery else None,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class ArchivedRun:
    """What archive kept (its return value): the model, the logs written, run.json's URI."""

    model: ModelSummary | None
    logs: tuple[str, ...] = ()
    run_json: str | None = None

    def to_payload(self) -> Payload:
        return {
            "model": self.model.to_payload() if self.model is not None else None,
            "logs": list(self.logs),
            "run_json": self.run_json,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> ArchivedRun:
        model = payload.get("model")
        return cls(
            model=ModelSummary.from_payload(model) if model else None,  # type: ignore[arg-type]
            logs=tuple(payload.get("logs") or ()),  # type: ignore[arg-type]
            run_json=payload.get("run_json"),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class PublishedLatest:
    """What publish did to `<output>/latest` (its return value)."""

    latest: str  # s3:// URI of the output's latest pointer
    moved: bool
    reason: str
    pointer: JsonObject  # this run's pointer, written when it moved
    current: object = None  # the pointer left in place when it did not move; else None

    def to_payload(self) -> Payload:
        return {
            "latest": self.latest,
            "moved": self.moved,
            "reason": self.reason,
            "pointer": self.pointer,
            "current": self.current,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> PublishedLatest:
        return cls(**payload)  # type: ignore[arg-type]
