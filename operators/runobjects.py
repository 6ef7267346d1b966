"""One run's Kubernetes objects, and the one way to delete them and wait until they are gone.

A run's objects are ended from several places: teardown, the launch (an
earlier try's leftovers, a ticket over the tenant's cap), the `on_kill` of
launch and train, and a restart stopping the failed gang. They differ only in
what goes (every kind, or the pods alone), the grace the pods get, and how
long the wait may last; `RunObjects` holds the rest:

- everything goes by the run's selector, which names its `tfjob.io/run-hash`:
  another run whose key collides is never matched, and `find_foreign` names
  such objects so that the launch can refuse the key (kubeobjects.py);
- the kinds are `kubeobjects.RUN_KINDS` (the janitor lists and deletes the
  same ones, object by object, each by the uid it listed: janitor.py);
- pods keep their own grace period unless one is given: `gracePeriodSeconds=0`
  would remove the object while its containers may still run;
- `remove` returns once the API server removed what it deleted (a watch,
  never a fixed sleep) and names what was left at the deadline: the caller
  fails with its own error. Nothing deleted means nothing to wait for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from kubernetes import client as k8s

from operators import kubeobjects
from operators.settings import LEFTOVER_TIMEOUT_SECONDS, TEARDOWN_GRACE_SECONDS
from operators.transient import call_with_retries
from tfjob.jsontypes import JsonObject

# Pods being deleted get their own grace period to end, and the wait allows that much
# more than the longest grace of any of them.
LEFTOVER_GRACE_MARGIN_SECONDS = 60
POD_KINDS = ("Pod",)


def leftover_wait_seconds(pods: Iterable[JsonObject]) -> int:
    """How long to wait for deleted pods (and their containers) to be gone."""
    return max(
        LEFTOVER_TIMEOUT_SECONDS,
        kubeobjects.longest_grace_period(pods) + LEFTOVER_GRACE_MARGIN_SECONDS,
    )


class RunAddress(Protocol):
    """Where a run's objects are: what `RunInfo` (operators/runinfo.py) says of it."""

    @property
    def namespace(self) -> str: ...
    @property
    def selector(self) -> str: ...
    @property
    def run_key(self) -> str: ...


@dataclass(frozen=True)
class Removal:
    """What `RunObjects.remove` did: `Kind/name` of what it deleted and of what was still
    there at the deadline, the deadline, and how long the wait took."""

    deleted: list[str]
    left: list[str]
    timeout: float
    waited_seconds: float


@dataclass(frozen=True)
class RunObjects:
    """The objects of one run (of `kinds`; None: every kind its selector deletes)."""

    api: k8s.CoreV1Api
    namespace: str
    selector: str
    run_key: str
    kinds: tuple[str, ...] | None = None

    @classmethod
    def of(cls, api: k8s.CoreV1Api, run: RunAddress) -> RunObjects:
        """Every object of `run`."""
        return cls(api, run.namespace, run.selector, run.run_key)

    def pods_only(self) -> RunObjects:
        """The run's gang: its pods, not the ConfigMap and Secrets a next gang mounts."""
        return replace(self, kinds=POD_KINDS)

    def list_pods(self) -> list[JsonObject]:
        return kubeobjects.list_run_pods(self.api, self.namespace, self.selector)

    def find_foreign(self, dag_id: str, run_id: str) -> list[str]:
        """Objects carrying this run's key that belong to another run (`ForeignObjectError`)."""
        return kubeobjects.find_foreign_objects(
            self.api, self.namespace, self.run_key, dag_id, run_id
        )

    def delete(self, grace_seconds: int | None = None) -> list[str]:
        """Delete the objects, without waiting; `Kind/name` of each."""
        return kubeobjects.delete_run_objects(
            self.api,
            self.namespace,
            self.selector,
            grace_period_seconds=grace_seconds,
            kinds=self.kinds,
        )

    def await_gone(self, timeout: float) -> list[str]:
        """Wait until none of the objects is left; `Kind/name` of what is at the deadline."""
        return kubeobjects.await_run_objects_gone(
            self.api, self.namespace, self.selector, timeout, kinds=self.kinds
        )

    def remove(
        self,
        log: logging.Logger,
        *,
        doing: str | None = None,
        grace_seconds: int | None = None,
        timeout: float | None = None,
    ) -> Removal:
        """Delete the objects and wait until they are gone.

        `timeout` None: the pods' own grace periods size the wait
        (`leftover_wait_seconds`). The list and the delete ride out a blinking API
        server until then. `doing` (e.g. "stopping the gang of run x") is logged
        with what was deleted before the wait.
        """
        if timeout is None:
            pods = call_with_retries(
                self.list_pods,
                deadline=time.monotonic() + LEFTOVER_TIMEOUT_SECONDS,
                what=f"listing the pods of run {self.run_key}",
                log=log,
            )
            timeout = leftover_wait_seconds(pods)
        deleted = call_with_retries(
            lambda: self.delete(grace_seconds),
            deadline=time.monotonic() + timeout,
            what=f"deleting the objects of run {self.run_key}",
            log=log,
        )
        if not deleted:
            return Removal([], [], timeout, 0.0)
        if doing:
            log.info(
                "%s (each pod gets its grace period, up to %ds waited): %s",
                doing,
                timeout,
                ", ".join(deleted),
            )
        started = time.monotonic()
        left = self.await_gone(timeout)
        return Removal(deleted, left, timeout, time.monotonic() - started)


def delete_when_killed(
    connect: Callable[[], k8s.CoreV1Api], run: RunAddress, log: logging.Logger, reason: str
) -> None:
    """What a killed task does: delete the run's objects with teardown's grace, without
    waiting, say so, and never raise (the kill goes on; teardown or the janitor removes
    what is left)."""
    try:
        deleted = RunObjects.of(connect(), run).delete(TEARDOWN_GRACE_SECONDS)
        log.info("%s: deleted %s", reason, ", ".join(deleted) or "nothing")
    except Exception:
        log.exception("%s: could not delete the objects of run %s", reason, run.run_key)


__all__ = [
    "LEFTOVER_GRACE_MARGIN_SECONDS",
    "POD_KINDS",
    "Removal",
    "RunAddress",
    "RunObjects",
    "delete_when_killed",
    "leftover_wait_seconds",
]
