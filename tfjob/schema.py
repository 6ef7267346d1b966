"""The request's JSON Schema, in the shapes the Airflow trigger form and the docs need.

The request model is the single source of truth; this module only exports it:
`request_json_schema()` for tools and docs, `airflow_param_specs()` for
Airflow `Param(default, **spec)` objects (one per top-level field, no `$ref`,
because Airflow validates each Param on its own), and
`render_request_reference()` for docs/request.md. No Airflow import here.
"""

import copy
import json

from tfjob.jsontypes import JsonObject
from tfjob.request.checks import DNS_LABEL_PATTERN
from tfjob.request.model import (
    MAX_NAME_LENGTH,
    MAX_TENANT_LENGTH,
    Role,
    TrainingRequest,
)
from tfjob.request.recovery import WARM_START_SCHEMA

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Checks the model does in code, repeated as schema keywords so forms catch them early.
_EXTRA_KEYWORDS: dict[str, JsonObject] = {
    "name": {"pattern": DNS_LABEL_PATTERN.pattern, "maxLength": MAX_NAME_LENGTH},
    "tenant": {"pattern": DNS_LABEL_PATTERN.pattern, "maxLength": MAX_TENANT_LENGTH},
    "entrypoint": {"minItems": 1},
    "bundle": {"pattern": r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+\.tar\.gz$"},
    "output": {"pattern": r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+$"},
    "warm_start": WARM_START_SCHEMA,
}

# Keywords a Param spec may carry (JSON Schema validation keywords Airflow understands).
_PARAM_KEYWORDS = (
    "type",
    "enum",
    "title",
    "minimum",
    "maximum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "items",
    "properties",
    "additionalProperties",
    "propertyNames",
    "required",
    "format",
    "anyOf",
)


def _default_of(name: str) -> tuple[bool, object]:
    """(has_default, JSON default) of a top-level field, including default factories."""
    field = TrainingRequest.model_fields[name]
    if field.is_required():
        return False, None
    value = field.get_default(call_default_factory=True)
    return True, _to_json(value)


def _to_json(value: object) -> object:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        return {str(getattr(k, "value", k)): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return getattr(value, "value", value)


def request_json_schema() -> JsonObject:
    """JSON Schema (draft 2020-12) of a training request, with descriptions and defaults."""
    schema = TrainingRequest.model_json_schema(mode="validation", by_alias=True)
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["title"] = "TrainingRequest"
    properties = schema["properties"]
    for name, prop in properties.items():
        has_default, default = _default_of(name)
        if has_default:
            prop["default"] = default
        prop.update(_EXTRA_KEYWORDS.get(name, {}))
    return schema


def _resolve_refs(node: object, definitions: JsonObject) -> object:
    """`node` with every local `$ref` replaced by its definition (the model has no cycles)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {
                **_resolve_refs(target, definitions),
                **{k: v for k, v in node.items() if k != "$ref"},
            }
            return _resolve_refs(merged, definitions)
        return {key: _resolve_refs(value, definitions) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve_refs(item, definitions) for item in node]
    return node


def _flatten_optional(prop: JsonObject) -> JsonObject:
    """`anyOf: [X, {type: null}]` as X with `type: [X.type, "null"]` (forms render it)."""
    options = prop.get("anyOf")
    if not options or len(options) != 2 or {"type": "null"} not in options:
        return prop
    other = next(option for option in options if option != {"type": "null"})
    if "type" not in other:
        return prop
    flat = {**other, **{key: value for key, value in prop.items() if key != "anyOf"}}
    flat["type"] = [other["type"], "null"]
    if "enum" in flat:
        flat["enum"] = [*flat["enum"], None]
    return flat


def airflow_param_specs(request: TrainingRequest | None = None) -> dict[str, JsonObject]:
    """Per top-level field, a spec for `Param(spec.pop("default"), **spec)`.

    Defaults come from `request` when given (e.g. a bundle's request.yaml),
    else from the model. A required field without a value gets default None
    and a type that allows null, so the form opens; the request model then
    reports the missing field with its usual message.
    """
    schema = request_json_schema()
    definitions = schema.get("$defs", {})
    values = request.model_dump(mode="json", by_alias=True) if request is not None else {}
    specs: dict[str, JsonObject] = {}
    for name, raw in schema["properties"].items():
        prop = _flatten_optional(_resolve_refs(copy.deepcopy(raw), definitions))
        spec: JsonObject = {key: prop[key] for key in _PARAM_KEYWORDS if key in prop}
        spec["title"] = raw.get("title") or name
        spec["description"] = prop.get("description", "")
        if name in values:
            spec["default"] = values[name]
        elif "default" in prop:
            spec["default"] = prop["default"]
        else:
            spec["default"] = None
        if spec["default"] is None:
            types = spec.get("type", [])
            types = types if isinstance(types, list) else [types]
            if "null" not in types:
                spec["type"] = [*types, "null"]
            if "enum" in spec and None not in spec["enum"]:
                spec["enum"] = [*spec["enum"], None]
        specs[name] = spec
    return specs


def _describe_type(prop: JsonObject, definitions: JsonObject) -> str:
    prop = _flatten_optional(_resolve_refs(prop, definitions))
    if "anyOf" in prop:  # a choice of kinds, e.g. restart_on: a name or a list of exit codes
        return " or ".join(_describe_type(option, definitions) for option in prop["anyOf"])
    if "enum" in prop:
        return " \\| ".join(f"`{value}`" for value in prop["enum"] if value is not None) + (
            " or null" if None in prop["enum"] else ""
        )
    kind = prop.get("type", "object")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join(kinds)
    if "items" in prop and prop["items"].get("type"):
        text = text.replace("array", f"list of {prop['items']['type']}")
    return text


def render_request_reference() -> str:
    """The field table of docs/request.md, generated from the schema."""
    schema = request_json_schema()
    definitions = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, prop in schema["properties"].items():
        default = "**required**" if name in required else f"`{_to_compact(prop.get('default'))}`"
        description = prop.get("description", "").replace("|", "\\|")
        lines.append(
            f"| `{name}` | {_describe_type(prop, definitions)} | {default} | {description} |"
        )
    lines += [
        "",
        "Per-role `resources` fields (roles: "
        + ", ".join(f"`{role.value}`" for role in Role)
        + "):",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
    ]
    for name, prop in definitions["RoleResources"]["properties"].items():
        lines.append(
            f"| `{name}` | {_describe_type(prop, definitions)} | "
            f"`{_to_compact(prop.get('default'))}` | {prop.get('description', '')} |"
        )
    return "\n".join(lines) + "\n"


def _to_compact(value: object) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


if __name__ == "__main__":
    print(render_request_reference(), end="")
