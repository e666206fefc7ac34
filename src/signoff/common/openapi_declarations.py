"""What routes and schemas declare for the OpenAPI document (signoff/api_docs.py builds it).

Routes name the refusals of their own with ``responses=errors(NotFound, ...)``: each
error answer documents the envelope with an ``enum`` of the codes it can carry.

Input limits are enforced by validators with the operator's settings (decisions.md
section 6); the document states their defaults, through ``schema_only`` keywords that
describe without enforcing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BaseModel, Field, WithJsonSchema
from pydantic.fields import FieldInfo

from signoff.config import Settings
from signoff.errors import AppError

ERROR_SCHEMA_REF = "#/components/schemas/Error"
CODES_KEY = "x-error-codes"

STATUS_MEANINGS = {
    400: "Invalid input (`details.fields` lists each field and its problem).",
    401: "Missing or invalid credentials.",
    403: "Not allowed for this caller.",
    404: "No such resource in the caller's organization (also for ids that are not UUIDs).",
    409: "In conflict with the resource's current state.",
    413: "The request body is larger than the limit (1 MiB by default).",
    429: "Rate limit exceeded: wait `Retry-After` seconds.",
    503: "The organization's (or the operator's) emergency stop is on: writes are refused.",
}

RATE_LIMIT_HEADERS: dict[str, dict[str, Any]] = {
    "X-RateLimit-Limit": {
        "description": "Calls allowed in the current window.",
        "schema": {"type": "integer"},
    },
    "X-RateLimit-Remaining": {
        "description": "Calls left in the current window.",
        "schema": {"type": "integer"},
    },
    "X-RateLimit-Reset": {
        "description": "When the window ends (Unix time, seconds).",
        "schema": {"type": "integer"},
    },
}
RETRY_AFTER_HEADER = {
    "description": "Seconds to wait before calling again.",
    "schema": {"type": "integer"},
    "required": True,
}


def _all_errors(base: type[AppError] = AppError) -> Iterable[type[AppError]]:
    yield base
    for sub in base.__subclasses__():
        yield from _all_errors(sub)


def all_error_codes() -> list[str]:
    return sorted({error.code for error in _all_errors()})


# ---- what routes and schemas use ----


def errors(*refusals: type[AppError]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: one entry per status its refusals carry, with the codes."""
    by_status: dict[int, list[str]] = {}
    for refusal in refusals:
        by_status.setdefault(refusal.status_code, []).append(refusal.code)
    return {status: error_response(status, codes) for status, codes in by_status.items()}


def schema_only(**keywords: Any) -> FieldInfo:
    """JSON-schema keywords that document a value without enforcing them: the limit is
    the validator's, taken from the operator's settings (this states the default)."""
    field: FieldInfo = Field(json_schema_extra=keywords)
    return field


def documented_as(schema: dict[str, Any]) -> WithJsonSchema:
    """The schema of a parameter the handler receives as a string and validates itself
    (400 VALIDATION_ERROR): its real type and limits, for clients and generated SDKs."""
    return WithJsonSchema(schema)


def default_setting(name: str) -> Any:
    """An operator setting's default, as the document states it."""
    return Settings.model_fields[name].default


class ErrorBody(BaseModel):
    code: Annotated[str, schema_only(enum=all_error_codes())] = Field(
        description="Stable and machine-readable; each response lists the codes it can carry."
    )
    message: str = Field(description="For people; may change.")
    details: dict[str, Any] = Field(
        description="VALIDATION_ERROR: `fields`, a list of `{field, message}`; "
        "INSUFFICIENT_SCOPE: `required_scope`; OWNER_DEACTIVATED: `connection_id` and "
        "`owner_id`; SELF_APPROVAL_FORBIDDEN: `request_id` and `user_id`; "
        "REQUEST_NOT_PENDING and STEP_NOT_PENDING: "
        "`status`; PAYLOAD_TOO_LARGE: `max_bytes`; otherwise usually empty."
    )


class Error(BaseModel):
    """The envelope of every refusal: ``{"error": {code, message, details}}``."""

    error: ErrorBody


DOCUMENT_MODELS: tuple[type[BaseModel], ...] = (Error, ErrorBody)


def error_response(status: int, codes: Iterable[str]) -> dict[str, Any]:
    unique = sorted(set(codes))
    listed = ", ".join(f"`{code}`" for code in unique)
    return {
        "description": f"{STATUS_MEANINGS.get(status, 'Refused.')} Codes: {listed}.",
        CODES_KEY: unique,
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        {"$ref": ERROR_SCHEMA_REF},
                        {
                            "type": "object",
                            "properties": {
                                "error": {
                                    "type": "object",
                                    "properties": {"code": {"enum": unique}},
                                }
                            },
                        },
                    ]
                }
            }
        },
    }


PARAMETER_SCHEMA = "x-parameter-schema"


def query_parameter(schema: dict[str, Any], description: str, default: Any = None) -> Any:
    """A field of a query model: its default, and how the OpenAPI document shows it (its
    real type and limits; the handler validates the string it is sent, 400 on error)."""
    return Field(default, description=description, json_schema_extra={PARAMETER_SCHEMA: schema})


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` of a query model declared with ``query_parameter``: the
    one declaration of a route's query, for the document as for the validation."""
    parameters = []
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if not isinstance(extra, dict) or PARAMETER_SCHEMA not in extra:
            continue
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": field.description or "",
                "schema": extra[PARAMETER_SCHEMA],
            }
        )
    return parameters


# A path id: any other string names nothing, a 404 (http.path_id).
UuidPath = Annotated[str, documented_as({"type": "string", "format": "uuid"})]
