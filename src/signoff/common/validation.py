"""Turning request bodies and query strings into validated models, or a 400 envelope.

Bodies are parsed here rather than by FastAPI's body binding so that (a) malformed JSON,
a missing or odd Content-Type, and Pydantic errors all become the same VALIDATION_ERROR
with ``details.fields``, and (b) operator-configurable limits reach the validators through
the validation context.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from signoff.config import Settings
from signoff.errors import ValidationFailed

ModelT = TypeVar("ModelT", bound=BaseModel)


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


def validate_model(model: type[ModelT], data: Any, settings: Settings) -> ModelT:
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
    return data


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
