"""RequestError, and pydantic's validation errors rewritten into it.

Users should read one sentence naming the field, the value given and what is
allowed, never pydantic's error list. Validators raise `invalid(...)`, which
carries those parts through pydantic; `convert_validation_error` turns the
first error, ours or pydantic's own (missing, unknown field, bounds), into a
`RequestError` of the same shape.
"""

import json
from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from tfjob.errors import TfjobError


class _Nothing:
    """The value of a field that was not given (a singleton, also across pickling)."""

    def __repr__(self) -> str:
        return "NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"


NOTHING = _Nothing()


class Unquoted(str):
    """A description standing in for a given value, shown without quotes."""


class RequestError(TfjobError):
    """One invalid request field: where, what was given, what is allowed."""

    def __init__(self, field: str, given: object, allowed: str) -> None:
        self.field = field
        self.given = given
        self.allowed = allowed
        super().__init__(format_request_error(field, given, allowed))

    def __reduce__(self) -> tuple[object, ...]:
        # ValueError pickles only the message; keep the parts (processes pass errors on).
        return (type(self), (self.field, self.given, self.allowed))


def describe_value(value: object) -> str:
    """A short rendering of a given value for error messages."""
    if value is NOTHING:
        return "nothing"
    if isinstance(value, Unquoted):
        return str(value)
    if isinstance(value, StrEnum):
        value = value.value
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_request_error(field: str, given: object, allowed: str) -> str:
    where = f"request.{field}" if field else "request"
    return f"{where}: {describe_value(given)} given; {allowed}"


def invalid(allowed: str, given: object = NOTHING, field: str = "") -> PydanticCustomError:
    """A validation failure carrying our message parts through pydantic."""
    return PydanticCustomError(
        "tfjob_invalid", "{allowed}", {"allowed": allowed, "given": given, "field": field}
    )


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The BaseModel inside an annotation like Foo, list[Foo], dict[K, Foo], Foo | None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) or ():
        found = _nested_model(argument)
        if found is not None:
            return found
    return None


def _model_at(root: type[BaseModel], location: tuple[object, ...]) -> type[BaseModel]:
    """The model whose field set applies at `location` (for unknown-field errors)."""
    model = root
    for part in location:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue
        nested = _nested_model(field.annotation)
        if nested is None:
            break
        model = nested
    return model


def _field_path(location: tuple[object, ...]) -> str:
    path = ""
    for part in location:
        if part == "[key]":
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("["):
            path += part
        else:
            path += f".{part}" if path else str(part)
    return path


def _allowed_for(error: Mapping[str, object]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in ("enum", "literal_error"):
        return "allowed: " + ctx.get("expected", "").replace("'", "")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bounds = {
            "greater_than_equal": "at least",
            "less_than_equal": "at most",
            "greater_than": "more than",
            "less_than": "less than",
        }
        return f"{bounds[kind]} {next(iter(ctx.values()))} is allowed"
    if kind.startswith("int_"):
        return "a whole number is allowed"
    if kind in ("string_type", "string_too_short"):
        return (
            "a non-empty string is allowed"
            if kind == "string_too_short"
            else "a string is allowed (quote numbers in YAML)"
        )
    if kind in ("list_type",):
        return "a list is allowed"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "a mapping is allowed"
    return str(error.get("msg", "invalid value")).lower()


def convert_validation_error(exc: ValidationError, root: type[BaseModel]) -> RequestError:
    """The first pydantic error of `exc`, rewritten as one RequestError."""
    error = exc.errors(include_url=False)[0]
    location = tuple(error.get("loc", ()))
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "tfjob_invalid":
        field = _field_path(location)
        extra = ctx.get("field") or ""
        if extra:
            field = f"{field}{extra}" if extra.startswith("[") or not field else f"{field}.{extra}"
        return RequestError(field, ctx.get("given", NOTHING), ctx["allowed"])
    if kind == "missing":
        model = _model_at(root, location[:-1])
        field_info = model.model_fields.get(location[-1])
        hint = f" ({field_info.description})" if field_info and field_info.description else ""
        return RequestError(_field_path(location), NOTHING, f"the field is required{hint}")
    if kind == "extra_forbidden":
        model = _model_at(root, location[:-1])
        names = [field.alias or name for name, field in model.model_fields.items()]
        return RequestError(
            _field_path(location),
            error.get("input"),
            "unknown field; allowed fields: " + ", ".join(names),
        )
    return RequestError(_field_path(location), error.get("input"), _allowed_for(error))
