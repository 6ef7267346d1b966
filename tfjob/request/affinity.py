"""A role's node affinity: the request's `node_affinity.<role>`, Kubernetes' own rules.

`required` is Kubernetes' `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`
(a node must match one term, a term matches when all its expressions do); `preferred` is its
`preferredDuringSchedulingIgnoredDuringExecution` (weighted terms a scheduler may favour).
Only `matchExpressions` are supported (no `matchFields`). The operators' value rules are
the API server's: In/NotIn one value or more, Exists/DoesNotExist none, Gt/Lt one integer.
"""

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from tfjob.request.checks import LABEL_NAME_PATTERN, LABEL_VALUE_PATTERN
from tfjob.request.errors import invalid
from tfjob.request.fields import StrictModel

MAX_TERMS = 8
MAX_EXPRESSIONS = 16
MAX_VALUES = 32
MAX_WEIGHT = 100


class NodeOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeExpression(StrictModel):
    """A node selector requirement: a label key, an operator, its values."""

    key: str
    operator: NodeOperator
    values: list[str] = Field(default_factory=list, max_length=MAX_VALUES)

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        prefix, _, name = value.rpartition("/")
        if len(name) > 63 or not LABEL_NAME_PATTERN.match(name) or len(prefix) > 253:
            raise invalid("a Kubernetes label key is allowed, e.g. topology.kubernetes.io/zone")
        return value

    @model_validator(mode="after")
    def _check_values(self) -> "NodeExpression":
        op, values = self.operator, self.values
        if op in (NodeOperator.IN, NodeOperator.NOT_IN) and not values:
            raise invalid(f"operator {op.value} needs at least one value", values, "values")
        if op in (NodeOperator.EXISTS, NodeOperator.DOES_NOT_EXIST) and values:
            raise invalid(f"operator {op.value} takes no values", values, "values")
        if op in (NodeOperator.GT, NodeOperator.LT) and (
            len(values) != 1 or not values[0].lstrip("-").isdigit()
        ):
            raise invalid(f"operator {op.value} needs exactly one integer value", values, "values")
        for value in values:
            if len(value) > 63 or not LABEL_VALUE_PATTERN.match(value):
                raise invalid("Kubernetes label values are allowed", value, "values")
        return self

    def to_manifest(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"key": self.key, "operator": self.operator.value}
        if self.values:
            entry["values"] = list(self.values)
        return entry


class NodeTerm(StrictModel):
    """A node selector term: every expression must hold."""

    match_expressions: list[NodeExpression] = Field(min_length=1, max_length=MAX_EXPRESSIONS)

    def to_manifest(self) -> dict[str, Any]:
        return {"matchExpressions": [e.to_manifest() for e in self.match_expressions]}


class PreferredNodeTerm(StrictModel):
    """A weighted term a scheduler may favour (1-100)."""

    weight: int = Field(ge=1, le=MAX_WEIGHT)
    preference: NodeTerm


class NodeAffinity(StrictModel):
    """One role's node affinity; a node must match one `required` term when any is given."""

    required: list[NodeTerm] = Field(default_factory=list, max_length=MAX_TERMS)
    preferred: list[PreferredNodeTerm] = Field(default_factory=list, max_length=MAX_TERMS)

    def expressions(self) -> list[tuple[str, NodeExpression]]:
        """(where, expression) of every expression, `where` relative to this affinity."""
        found = [
            (f"required[{t}].match_expressions[{e}]", expression)
            for t, term in enumerate(self.required)
            for e, expression in enumerate(term.match_expressions)
        ]
        return found + [
            (f"preferred[{t}].preference.match_expressions[{e}]", expression)
            for t, term in enumerate(self.preferred)
            for e, expression in enumerate(term.preference.match_expressions)
        ]

    def to_manifest(self) -> dict[str, Any]:
        """Kubernetes' `nodeAffinity` object (empty when nothing is given)."""
        affinity: dict[str, Any] = {}
        if self.required:
            affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [term.to_manifest() for term in self.required]
            }
        if self.preferred:
            affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": term.weight, "preference": term.preference.to_manifest()}
                for term in self.preferred
            ]
        return affinity
