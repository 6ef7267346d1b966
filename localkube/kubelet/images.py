"""The image map: which image names localkube can run, and how.

There is no container engine: an image is "pulled" when a pattern of
localkube/images.yaml (or the file named by LOCALKUBE_IMAGES) matches it. The
only kind today is `host`: the host's system directories and the project's venv
(with the interpreter it comes from), read-only, the venv first on PATH, so
`python3` in a pod is the venv's python; `host_dirs` names the venv and the
interpreter for the shim, which builds the rest of the root (podroot.py). An
unmatched image fails like an unpullable one (ErrImagePull, then ImagePullBackOff).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum

import yaml

DEFAULT_IMAGES_FILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "images.yaml")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageKind(StrEnum):
    HOST = "host"


@dataclass(frozen=True)
class ImageRule:
    pattern: str
    kind: ImageKind
    cmd: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResolvedImage:
    image: str
    kind: ImageKind
    cmd: list[str]
    path: str
    # Host directories the image needs at the same path in the container (the venv and its
    # interpreter); nothing above them is visible, and they may live under /tmp.
    host_dirs: tuple[str, ...] = ()


def load_image_rules(path: str | None = None) -> list[ImageRule]:
    path = path or os.environ.get("LOCALKUBE_IMAGES") or DEFAULT_IMAGES_FILE
    with open(path) as f:
        entries = yaml.safe_load(f) or []
    rules = []
    for i, entry in enumerate(entries):
        kind = entry.get("kind", "host")
        try:
            rules.append(
                ImageRule(str(entry["pattern"]), ImageKind(kind), list(entry.get("cmd") or []))
            )
        except (KeyError, ValueError):
            allowed = [k.value for k in ImageKind]
            raise ValueError(
                f"{path}[{i}]: {entry!r}; each entry needs a pattern and kind in {allowed}"
            ) from None
    return rules


def find_venv() -> str | None:
    venv = os.environ.get("LOCALKUBE_VENV") or sys.prefix
    return venv if os.path.isdir(os.path.join(venv, "bin")) else None


def find_venv_interpreter_home(venv: str) -> str | None:
    """The installation the venv's python comes from (pyvenv.cfg `home`, less its bin/).

    A venv's bin/python is a symlink into it (e.g. /root/.pyenv/versions/3.11.7, below a
    0700 /root): the shim makes it reachable for a non-root container user too."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    home = value.strip().rstrip("/")
                    return os.path.dirname(home) if os.path.basename(home) == "bin" else home
    except OSError:
        return None
    return None


def resolve_image(image: str, rules: list[ImageRule]) -> ResolvedImage | None:
    """The rule for `image`, or None when no pattern matches (the pull fails)."""
    for rule in rules:
        if fnmatch.fnmatchcase(image, rule.pattern):
            venv = find_venv()
            path = f"{venv}/bin:{DEFAULT_PATH}" if venv else DEFAULT_PATH
            dirs = [venv, find_venv_interpreter_home(venv)] if venv else []
            host_dirs = tuple(d for d in dict.fromkeys(dirs) if d and os.path.isdir(d))
            return ResolvedImage(image, rule.kind, rule.cmd, path, host_dirs)
    return None


def resolve_pod_images(
    containers: list[dict], rules: list[ImageRule]
) -> tuple[dict[str, ResolvedImage], list[dict]]:
    """Each container's resolved image by container name, and the containers none matched."""
    resolved, missing = {}, []
    for c in containers:
        image = resolve_image(c.get("image", ""), rules)
        if image is None:
            missing.append(c)
        else:
            resolved[c["name"]] = image
    return resolved, missing


def describe_pull_failure(
    image: str | None, reason: str, first: bool
) -> tuple[str, list[tuple[str, str, str]]]:
    """For a container whose image no rule matches: its waiting message under `reason`
    (ErrImagePull, then ImagePullBackOff) and the events to record, as (type, reason,
    message): Pulling and Failed the first time, BackOff on each retry after."""
    message = (
        f'failed to pull and unpack image "{image}": no rule in localkube images.yaml matches it'
    )
    if reason == "ImagePullBackOff":
        message = f'Back-off pulling image "{image}"'
    if first:
        return message, [
            ("Normal", "Pulling", f'Pulling image "{image}"'),
            ("Warning", "Failed", f'Failed to pull image "{image}": {message}'),
            ("Warning", "Failed", "Error: ErrImagePull"),
        ]
    if reason == "ImagePullBackOff":
        return message, [("Normal", "BackOff", message)]
    return message, []
