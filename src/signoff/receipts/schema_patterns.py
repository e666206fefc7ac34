"""Regular expressions of an ``arguments_schema``, matched in linear time.

``jsonschema`` matches ``pattern`` and ``patternProperties`` with Python's ``re``, which
backtracks: a pattern such as ``^(a+)+$`` against a long enough string holds a worker
for as long as it likes. Here they are compiled and matched by RE2 (the
``google-re2`` package), whose matching time grows linearly with the input whatever the
pattern. A pattern RE2 cannot compile (backreferences, lookarounds: exactly the features
that need backtracking), a pattern over ``MAX_PATTERN_LENGTH`` characters, or one whose
compiled form is over RE2's memory budget is refused with a 400 naming it.

``unevaluatedProperties`` matches ``patternProperties`` inside ``jsonschema`` itself, out
of our reach: a schema using both is refused rather than matched with ``re``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

MAX_PATTERN_LENGTH = 1_000
# Memory RE2 may use to compile one pattern: a bound on what a huge {n,m} expands to.
_MAX_MEMORY_BYTES = 1 << 20
_CACHED_PATTERNS = 256


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the caller's 400, not our log line
    options.max_mem = _MAX_MEMORY_BYTES
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=_CACHED_PATTERNS)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``ValueError`` saying why it is refused."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"is over {MAX_PATTERN_LENGTH} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error:
        raise ValueError(
            "is not a regular expression that matches in linear time (no backreferences "
            "or lookarounds)"
        ) from None


def refused_patterns(schema: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, why) of each pattern of ``schema`` that is refused, and of each
    ``unevaluatedProperties`` when the schema also has ``patternProperties``."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(schema, ())]
    uses_unevaluated: list[tuple[Any, ...]] = []
    has_pattern_properties = False
    while stack:
        node, at = stack.pop()
        if isinstance(node, list):
            stack.extend((value, (*at, index)) for index, value in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield from _why(value, (*at, key))
            elif key == "patternProperties" and isinstance(value, dict):
                has_pattern_properties = True
                for pattern in value:
                    yield from _why(pattern, (*at, key, pattern))
            elif key == "unevaluatedProperties":
                uses_unevaluated.append((*at, key))
            stack.append((value, (*at, key)))
    if has_pattern_properties:
        for at in uses_unevaluated:
            yield at, "cannot be combined with patternProperties"


def _why(pattern: str, at: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    try:
        compiled(pattern)
    except ValueError as exc:
        yield at, f"{pattern[:40]!r} {exc}"


def _search(pattern: str, text: str) -> bool:
    return compiled(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, pattern_properties: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    patterns = schema.get("patternProperties")
    if not patterns or not validator.is_type(instance, "object"):
        yield from _PLAIN_ADDITIONAL(validator, additional, instance, schema)
        return
    properties = schema.get("properties", {})
    extras = [
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        joined = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"{joined} not allowed: no property or pattern names them")


_PLAIN_ADDITIONAL = Draft202012Validator.VALIDATORS["additionalProperties"]

# Draft 2020-12, with every regular expression it matches matched by RE2.
LinearTimeValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional,
    },
)
