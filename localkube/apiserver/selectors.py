"""Label and field selectors: parsed once per request, then matched per object cheaply.

Label selectors support `=`, `==`, `!=`, `in`, `notin`, `key` and `!key`; field selectors support
`=`, `==` and `!=` on any dotted path (metadata.name, status.phase, spec.nodeName,
involvedObject.name, ...). A missing field compares as the empty string, as on a real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localkube.apiserver.errors import bad_request

Matcher = Callable[[dict], bool]


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "=":
            return present and value == self.values[0]
        if self.operator == "!=":
            return not present or value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present


_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    if not text:
        return ()
    requirements = []
    for part in _split_top_level(text):
        set_match = _SET_RE.match(part)
        if set_match:
            values = tuple(v.strip() for v in set_match.group(3).split(",") if v.strip())
            requirements.append(Requirement(set_match.group(1), set_match.group(2), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(Requirement(key.strip(), "!=", (value.strip(),)))
        elif "==" in part:
            key, value = part.split("==", 1)
            requirements.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif "=" in part:
            key, value = part.split("=", 1)
            requirements.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif part.startswith("!"):
            requirements.append(Requirement(part[1:].strip(), "!"))
        elif re.match(r"^[A-Za-z0-9._/-]+$", part):
            requirements.append(Requirement(part, "exists"))
        else:
            raise bad_request(
                f"unable to parse requirement: {part!r}; allowed forms: key=value, "
                "key==value, key!=value, key in (a,b), key notin (a,b), key, !key"
            )
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def lookup_field(obj: dict, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str | None) -> tuple[tuple[str, str, str], ...]:
    if not text:
        return ()
    terms = []
    for part in _split_top_level(text):
        for operator in ("!=", "==", "="):
            if operator in part:
                key, value = part.split(operator, 1)
                terms.append((key.strip(), "!=" if operator == "!=" else "=", value.strip()))
                break
        else:
            raise bad_request(
                f"invalid selector: {part!r}; field selectors need "
                "field=value, field==value or field!=value"
            )
    return tuple(terms)


def fields_match(terms: tuple[tuple[str, str, str], ...], obj: dict) -> bool:
    for path, operator, value in terms:
        actual = lookup_field(obj, path)
        if (actual == value) != (operator == "="):
            return False
    return True


def label_selector_from_object(selector: dict | None) -> Matcher:
    """A matcher for a metav1.LabelSelector ({matchLabels, matchExpressions}) object.

    Per Kubernetes, an empty selector matches everything and a null one nothing.
    """
    if selector is None:
        return lambda labels: False
    requirements = [
        Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
            expr.get("operator", "")
        )
        if op is None:
            raise ValueError(
                f"matchExpressions operator {expr.get('operator')!r} is not valid; "
                "allowed: In, NotIn, Exists, DoesNotExist"
            )
        requirements.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    frozen = tuple(requirements)
    return lambda labels: labels_match(frozen, labels)
