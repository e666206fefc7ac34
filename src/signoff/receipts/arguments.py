"""The arguments a request carries: their hash, and their JSON Schema's checks.

The hash names the arguments in a receipt: ``"sha-256:"`` + base64url (no padding) of the
SHA-256 of their RFC 8785 canonical form (the ``rfc8785`` package), so any language with
an RFC 8785 encoder computes the same. A request without arguments hashes as ``{}``.

Schemas are JSON Schema draft 2020-12, checked with ``jsonschema``. Only references
inside the schema itself (``#...``) are followed: nothing is ever fetched, and a schema
that refers to itself without end is refused instead of hanging the check.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import rfc8785
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import NoSuchResource

from signoff.errors import ValidationFailed
from signoff.models.approvals import EMPTY_ARGUMENTS_HASH
from signoff.receipts.schema_patterns import LinearTimeValidator, refused_patterns

HASH_PREFIX = "sha-256:"
# At most this many failures are named in one answer.
_MAX_REPORTED = 20
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


def canonical_hash(value: Any) -> str:
    """``"sha-256:"`` and the unpadded base64url SHA-256 of ``value``'s RFC 8785 form: a
    hash any language can compute again from the JSON alone.

    Raises ``ValueError`` for what RFC 8785 cannot encode (integers past 2**53 - 1)."""
    try:
        canonical = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"cannot be put in RFC 8785 canonical form: {exc}") from None
    digest = hashlib.sha256(canonical).digest()
    return HASH_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def arguments_hash(arguments: Mapping[str, Any] | None) -> str:
    """The hash a receipt names for ``arguments`` (None: no arguments, as ``{}``)."""
    if not arguments:
        return EMPTY_ARGUMENTS_HASH
    return canonical_hash(arguments)


def json_pointer(path: Any) -> str:
    """RFC 6901 pointer of a path of keys and indexes ("" for the whole document)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _outside_references(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    stack: list[tuple[Any, tuple[Any, ...]]] = [(node, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _REFERENCE_KEYWORDS and isinstance(value, str):
                    if not value.startswith("#"):
                        yield (*at, key)
                else:
                    stack.append((value, (*at, key)))
        elif isinstance(item, list):
            stack.extend((value, (*at, index)) for index, value in enumerate(item))


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(uri)


def _field(name: str, path: Any, message: str) -> dict[str, str]:
    pointer = json_pointer(path)
    return {"field": name + pointer, "pointer": pointer, "message": message}


def check_against_schema(arguments: Mapping[str, Any] | None, schema: Mapping[str, Any]) -> None:
    """Raise 400 ``VALIDATION_ERROR`` naming each failing JSON pointer: of the schema
    (``arguments_schema/...``) when it is no draft 2020-12 schema or refers outside
    itself, else of the arguments (``arguments/...``) that do not satisfy it."""
    outside = [
        _field("arguments_schema", at, "refers outside the schema; only '#...' references")
        for at in _outside_references(schema)
    ]
    if outside:
        raise ValidationFailed.for_fields(outside[:_MAX_REPORTED])
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValidationFailed.for_fields(
            [_field("arguments_schema", exc.absolute_path, exc.message)]
        ) from None
    # Regular expressions are matched by RE2, in linear time (receipts/schema_patterns.py).
    refused = [_field("arguments_schema", at, why) for at, why in refused_patterns(schema)]
    if refused:
        raise ValidationFailed.for_fields(refused[:_MAX_REPORTED])
    registry: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
    validator = LinearTimeValidator(schema, registry=registry)
    failures: list[dict[str, str]] = []
    try:
        for error in validator.iter_errors(dict(arguments or {})):
            failures.append(_field("arguments", error.absolute_path, error.message))
            if len(failures) >= _MAX_REPORTED:
                break
    except RecursionError:
        raise ValidationFailed.for_field(
            "arguments_schema", "refers to itself without end"
        ) from None
    except Exception as exc:  # an unresolvable '#...' reference, say
        raise ValidationFailed.for_field(
            "arguments_schema", f"cannot be applied: {type(exc).__name__}"
        ) from None
    if failures:
        raise ValidationFailed.for_fields(failures)
