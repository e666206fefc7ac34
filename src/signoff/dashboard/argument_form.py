"""Edit and approve: the form a request's ``arguments_schema`` generates, read back.

Each top-level property of an object schema is one field, by its kind: ``string``,
``number``, ``integer``, ``boolean``, ``enum`` (a list of scalars to choose from), an
``array`` of scalars (one item a line), and anything else a JSON text field. A schema
that is no object with properties is edited as one JSON text field. What is read back is
checked against the schema by the API's own check (``receipts.arguments``), so the form
refuses nothing the API would take and takes nothing it would refuse; the decision
itself goes through ``approvals.service.decide`` like every other.

Pure: no I/O, so it is tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonpatch
import orjson
from jsonpointer import resolve_pointer

from signoff.errors import ValidationFailed
from signoff.receipts.arguments import check_against_schema

FieldKind = Literal["string", "number", "integer", "boolean", "enum", "array", "json"]
# The form's names: ``arg:<property>``, and the whole arguments as one JSON field.
PREFIX = "arg:"
WHOLE = "arguments_json"
_SCALARS = ("string", "number", "integer", "boolean")
# A text field longer than this, or with a line break, is a text area.
_LONG_TEXT = 120


@dataclass
class ArgumentField:
    name: str  # the property
    kind: FieldKind
    value: str  # as the input shows it
    required: bool = False
    description: str = ""
    options: tuple[str, ...] = ()  # an enum's choices, as JSON
    item_kind: str = "string"  # an array's items
    checked: bool = False  # a boolean's state
    error: str = ""

    @property
    def input_name(self) -> str:
        return PREFIX + self.name

    @property
    def is_long(self) -> bool:
        return len(self.value) > _LONG_TEXT or "\n" in self.value


@dataclass
class ArgumentForm:
    fields: list[ArgumentField]
    whole: bool  # one JSON field for everything
    errors: list[str] = field(default_factory=list)


def _type_of(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the field's own type
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def _kind_of(schema: Any) -> tuple[FieldKind, str]:
    """The field's kind for a property's schema, and an array's items' kind."""
    if not isinstance(schema, Mapping):
        return "json", ""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(_is_scalar(v) for v in enum):
        return "enum", ""
    kind = _type_of(schema)
    if kind in _SCALARS:
        return kind, ""  # type: ignore[return-value]
    if kind == "array":
        items = schema.get("items")
        item_kind = _type_of(items) if isinstance(items, Mapping) else None
        if item_kind in _SCALARS and "enum" not in (items or {}):
            return "array", item_kind or "string"
    return "json", ""


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _shown(kind: FieldKind, value: Any, present: bool) -> str:
    if not present:
        return ""
    if kind == "string" and isinstance(value, str):
        return value
    if kind in ("number", "integer") and isinstance(value, int | float):
        return _json(value)
    if kind == "array" and isinstance(value, list) and all(_is_scalar(v) for v in value):
        return "\n".join(v if isinstance(v, str) else _json(v) for v in value)
    if kind == "enum":
        return _json(value)
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def build_form(schema: Mapping[str, Any] | None, arguments: Mapping[str, Any]) -> ArgumentForm:
    """The form for ``schema``, filled with ``arguments``."""
    properties = (schema or {}).get("properties")
    if _type_of(schema or {}) not in ("object", None) or not isinstance(properties, Mapping):
        return ArgumentForm(
            [ArgumentField("", "json", _shown("json", dict(arguments), True))], True
        )
    required = set((schema or {}).get("required") or [])
    fields = []
    # The required first (PostgreSQL's JSON does not keep the schema's own order).
    ordered = sorted(properties.items(), key=lambda item: item[0] not in required)
    for name, prop in ordered:
        kind, item_kind = _kind_of(prop)
        present = name in arguments
        value = arguments.get(name)
        # A value the field cannot show as it is (a string where an integer belongs) is
        # shown as JSON, so that nothing is lost by opening the form.
        if present and kind != "json" and not _fits(kind, value):
            kind, item_kind = "json", ""
        description = prop.get("description", "") if isinstance(prop, Mapping) else ""
        enum = prop.get("enum") if isinstance(prop, Mapping) and kind == "enum" else []
        fields.append(
            ArgumentField(
                str(name),
                kind,
                _shown(kind, value, present),
                required=name in required,
                description=str(description),
                options=tuple(_json(v) for v in enum or []),
                item_kind=item_kind or "string",
                checked=kind == "boolean" and value is True,
            )
        )
    # Arguments the schema does not name (additionalProperties) stay editable as JSON.
    fields.extend(
        ArgumentField(str(name), "json", _shown("json", value, True))
        for name, value in arguments.items()
        if name not in properties
    )
    return ArgumentForm(fields, False)


def _fits(kind: FieldKind, value: Any) -> bool:
    match kind:
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "integer" | "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "array":
            return isinstance(value, list) and all(_is_scalar(v) for v in value)
    return True


def read_form(
    schema: Mapping[str, Any] | None, original: Mapping[str, Any], posted: Mapping[str, str]
) -> tuple[dict[str, Any] | None, ArgumentForm]:
    """The arguments the POSTed form gives, checked against ``schema``; or None and the
    form again, showing what was posted and each field's error."""
    form = build_form(schema, original)
    arguments: dict[str, Any] = {}
    for item in form.fields:
        raw = posted.get(WHOLE if form.whole else item.input_name, "")
        item.value = raw if item.kind != "boolean" else item.value
        try:
            present, value = _read(item, raw, posted, item.name in original)
        except ValueError as exc:
            item.error = str(exc)
            continue
        if form.whole:
            if not isinstance(value, dict):
                item.error = "must be a JSON object"
                continue
            arguments = value
        elif present:
            arguments[item.name] = value
        if item.kind == "boolean":
            item.checked = value is True
    if any(item.error for item in form.fields):
        return None, form
    try:
        check_against_schema(arguments, schema or {})
    except ValidationFailed as exc:
        _place_errors(form, exc)
        return None, form
    return arguments, form


def _read(
    item: ArgumentField, raw: str, posted: Mapping[str, str], was_present: bool
) -> tuple[bool, Any]:
    """Whether the field gives a value, and which."""
    if item.kind == "boolean":
        return True, posted.get(item.input_name) == "true"
    text = raw.strip() if item.kind != "string" else raw
    if not text and not (item.kind == "string" and was_present):
        if item.required:
            raise ValueError("is required")
        return False, None
    match item.kind:
        case "string":
            return True, raw.replace("\r\n", "\n")
        case "integer":
            return True, _integer(text)
        case "number":
            return True, _number(text)
        case "enum":
            if text not in item.options:
                raise ValueError("must be one of the choices")
            return True, orjson.loads(text)
        case "array":
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return True, [_item(item.item_kind, line) for line in lines]
    try:
        return True, orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("is not valid JSON") from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("must be a whole number") from None


def _number(text: str) -> float | int:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError("must be a number")
    return value


def _item(kind: str, line: str) -> Any:
    if kind == "integer":
        return _integer(line)
    if kind == "number":
        return _number(line)
    if kind == "boolean":
        if line not in ("true", "false"):
            raise ValueError("items must be true or false")
        return line == "true"
    return line


def _place_errors(form: ArgumentForm, exc: ValidationFailed) -> None:
    """The schema's failures on their fields (by the pointer's first part), the rest
    above the form."""
    by_name = {item.name: item for item in form.fields}
    for failure in exc.details.get("fields", []):
        pointer = str(failure.get("pointer", ""))
        first = pointer.split("/")[1].replace("~1", "/").replace("~0", "~") if pointer else ""
        target = by_name.get(first) if not form.whole else form.fields[0]
        message = str(failure.get("message", "is not valid"))
        if target is not None and not target.error:
            target.error = (
                message if form.whole or pointer.count("/") == 1 else f"{pointer}: {message}"
            )
        else:
            form.errors.append(f"{pointer or 'arguments'}: {message}")


@dataclass(frozen=True)
class Change:
    """One line of the diff shown before confirming."""

    op: str  # add, remove, replace (moves and copies are shown as what they leave)
    path: str
    old: str | None
    new: str | None


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """The edit as lines of old → new values, from its RFC 6902 patch."""
    lines = []
    for op in jsonpatch.make_patch(dict(old), dict(new)).patch:
        path = op["path"]
        before = _at(old, path) if op["op"] in ("replace", "remove") else None
        after = _json(op["value"]) if "value" in op else None
        if op["op"] in ("move", "copy"):
            after = _at(new, path)
        lines.append(Change(op["op"], path or "/", before, after))
    return lines


def _at(document: Mapping[str, Any], pointer: str) -> str | None:
    try:
        return _json(resolve_pointer(dict(document), pointer))
    except Exception:  # a pointer the patch made that the document no longer has
        return None
