"""Turning request bodies and query strings into validated models, or a 400 envelope.

Bodies are parsed here rather than by FastAPI's body binding so that (a) malformed JSON,
a missing or odd Content-Type, and Pydantic errors all become the same VALIDATION_ERROR
with ``details.fields``, and (b) operator-configurable limits reach the validators through
the validation context.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, BeforeValidator, ValidationError
from starlette.requests import Request

from signoff.config import Settings
from signoff.errors import ValidationFailed

ModelT = TypeVar("ModelT", bound=BaseModel)
MAX_URL_LENGTH = 2048


def _reject_bool(value: Any) -> Any:
    # Pydantic's lax mode reads true as 1; a boolean where a count belongs is a mistake.
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


Count = Annotated[int, BeforeValidator(_reject_bool)]


def validate_callback_url(
    value: str, *, https_only: bool, credentials_advice: str = "use callback_headers instead"
) -> str:
    """The form every outbound URL must have (callbacks and notification channels alike):
    absolute http or https with a host, no credentials, https only in production. Where
    its host may lead is ``webhooks/urlpolicy.py``'s part."""
    if len(value) > MAX_URL_LENGTH:
        raise ValueError(f"must be at most {MAX_URL_LENGTH} characters")
    import httpx

    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ValueError(f"is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("must be an absolute http or https URL")
    if https_only and url.scheme != "https":
        raise ValueError("must use https in production")
    if url.userinfo:
        raise ValueError(f"must not carry credentials; {credentials_advice}")
    return value


def _field_name(location: tuple[int | str, ...]) -> str:
    parts = [str(part) for part in location if part not in ("body", "query")]
    return ".".join(parts) or "body"


def _message(error: Any) -> str:
    message = str(error["msg"])
    # Pydantic prefixes custom errors with "Value error, "; the client needs only the reason.
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def validation_failed_from(exc: ValidationError, prefix: tuple[str, ...] = ()) -> ValidationFailed:
    fields = [
        {"field": _field_name((*prefix, *error["loc"])), "message": _message(error)}
        for error in exc.errors(include_url=False)
    ]
    return ValidationFailed.for_fields(fields)


# Integers a JSON value may hold: what every store and encoder here round-trips exactly.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def check_json_values(data: Any, max_nesting: int) -> None:
    """Refuse (400, naming the field) what a database or encoder cannot keep as it came.

    - a NUL character in any string or key (PostgreSQL text cannot hold one);
    - an integer beyond 64 bits (it would come back changed, or not at all);
    - a field nested deeper than ``max_nesting`` levels below the top (it could not be
      encoded again later).

    Iterative, so a hostile nesting depth cannot exhaust Python's recursion limit.
    """
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        # A top-level field's value sits at path length 1, its members at 2, and so on.
        if len(path) > max_nesting + 1:
            raise ValidationFailed.for_field(
                _field_name(path[:1]), f"is nested deeper than {max_nesting} levels"
            )
        if isinstance(value, str):
            if "\x00" in value:
                raise ValidationFailed.for_field(
                    _field_name(path), "must not contain NUL (\\u0000) characters"
                )
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValidationFailed.for_field(
                    _field_name(path),
                    "integers must lie within 64 bits (-2^63 to 2^63-1); "
                    "send larger numbers as strings",
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and "\x00" in key:
                    raise ValidationFailed.for_field(
                        _field_name(path), "keys must not contain NUL (\\u0000) characters"
                    )
                stack.append((item, (*path, str(key))))
        elif isinstance(value, list):
            stack.extend((item, (*path, str(index))) for index, item in enumerate(value))


def validate_model(model: type[ModelT], data: Any, settings: Settings) -> ModelT:
    check_json_values(data, settings.max_metadata_depth)
    try:
        return model.model_validate(data, context={"settings": settings})
    except ValidationError as exc:
        raise validation_failed_from(exc) from None


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``), not yet validated."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValidationFailed.for_field("body", f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationFailed.for_field("body", "must be a JSON object")
    if _has_huge_float(data):
        _refuse_integers_beyond_64_bits(raw)
    return data


def _has_huge_float(data: Any) -> bool:
    """Whether a float as large as an integer beyond 64 bits appears: the parser reads such
    an integer as a float (losing digits), so only then is the body read again exactly."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, float) and abs(value) >= 2**63:
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _refuse_integers_beyond_64_bits(raw: bytes) -> None:
    def exact_int(text: str) -> int:
        number = int(text)
        if not INT64_MIN <= number <= INT64_MAX:
            raise ValidationFailed.for_field(
                "body",
                f"the integer {text[:30]} is beyond 64 bits (-2^63 to 2^63-1); "
                "send larger numbers as strings",
            )
        return number

    json.loads(raw, parse_int=exact_int)


async def parse_json_body(request: Request, model: type[ModelT], settings: Settings) -> ModelT:
    return validate_model(model, await read_json_object(request), settings)


def settings_from(info_context: Any) -> Settings:
    """The operator's settings, handed to validators through the validation context."""
    if isinstance(info_context, dict):
        settings = info_context.get("settings")
        if isinstance(settings, Settings):
            return settings
    from signoff.config import get_settings

    return get_settings()


def nesting_depth(value: Any) -> int:
    """How many objects and arrays lie inside one another in ``value`` (a scalar: 0)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest
