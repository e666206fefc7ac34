"""Bodies and query parameters of the approvals API, and the shapes it answers with.

Input models follow decisions.md section 13: unknown fields are ignored, and ``null`` or
``""`` for an optional field means "not given". Limits come from the operator's settings
(decisions.md section 6) through the validation context.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from signoff.approvals.json_fields import REQUEST_FIELDS, Priority
from signoff.approvals.listing import ListFilters
from signoff.approvals.previews import PreviewError, PreviewKind, check_content
from signoff.approvals.state import REQUEST_STATUSES
from signoff.common.openapi_declarations import default_setting, query_parameter, schema_only
from signoff.common.time import parse_timestamp, utcnow
from signoff.common.validation import (
    MAX_URL_LENGTH,
    Count,
    nesting_depth,
    settings_from,
    validate_callback_url,
)
from signoff.errors import ValidationFailed
from signoff.policies.schemas import StandingGrantIn
from signoff.receipts.arguments import arguments_hash, check_against_schema

ACTION_TYPE_PATTERN = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
HEADER_NAME_PATTERN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Headers a caller may not set on callbacks: transport headers, and every header we sign
# or number deliveries with (a receiver must be able to trust them).
RESERVED_CALLBACK_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
        "x-service-signature",
        "x-service-signature-previous",
        "x-service-delivery-id",
        "x-service-attempt",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "user-agent",
    }
)
# RFC 9110 section 5.5: a field value is visible ASCII, with spaces and tabs only inside.
# Refused as well: obs-text (bytes above 0x7E), which HTTP clients encode inconsistently.
HEADER_VALUE_PATTERN = re.compile(r"^(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?$")
# The highest page a list reads: far past any real history, and within every offset type.
MAX_PAGE = 10_000_000
_UNENCODED_PLUS_OFFSET = re.compile(r" (\d{2}:?\d{2})$")


def _json_object(
    value: dict[str, Any] | None, max_depth: int, max_bytes: int
) -> dict[str, Any] | None:
    """``value`` if it is within the depth and size limits of a stored JSON object."""
    if value is None:
        return None
    if nesting_depth(value) > max_depth:
        raise ValueError(f"is nested deeper than {max_depth} levels")
    try:
        size = len(orjson.dumps(value))
    except orjson.JSONEncodeError as exc:
        # Whatever cannot be encoded now could never be sent in a callback.
        raise ValueError(f"cannot be stored as JSON: {exc}") from None
    if size > max_bytes:
        raise ValueError(f"must be at most {max_bytes} bytes as JSON")
    return value


def _drop_absent(data: Any, optional: frozenset[str]) -> Any:
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if not (k in optional and v in (None, ""))}
    return data


def _legacy_defaults(data: Any) -> Any:
    """SIGNOFF_COMPAT_LEGACY_CLIENTS: older clients and no-code steps leave out priority
    and description; they get ``medium`` and an empty description (docs/configuration.md)."""
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    if filled.get("priority") in (None, ""):
        filled["priority"] = "medium"
    if filled.get("description") is None:
        filled["description"] = ""
    return filled


def _require_text(value: str, field: str, limit: int) -> str:
    if not value.strip():
        raise ValueError(f"{field} must not be empty")
    if len(value) > limit:
        raise ValueError(f"must be at most {limit} characters")
    return value


# The limits as the OpenAPI document states them: the defaults of settings the validators
# below read (decisions.md section 6).
_NOT_BLANK = r"\S"
_TITLE = schema_only(minLength=1, maxLength=default_setting("max_title_length"), pattern=_NOT_BLANK)
_DESCRIPTION = schema_only(
    minLength=1, maxLength=default_setting("max_description_length"), pattern=_NOT_BLANK
)
_COMMENT = schema_only(maxLength=default_setting("max_comment_length"))
_LABEL = schema_only(maxLength=default_setting("max_label_length"))
_ACTION_TYPE = schema_only(
    maxLength=default_setting("max_label_length"), pattern=ACTION_TYPE_PATTERN.pattern
)
_IDEMPOTENCY_KEY = schema_only(maxLength=default_setting("max_idempotency_key_length"))
_CALLBACK_HEADERS = schema_only(
    maxProperties=default_setting("max_callback_headers"),
    propertyNames={"pattern": HEADER_NAME_PATTERN.pattern},
    additionalProperties={
        "type": "string",
        "maxLength": default_setting("max_callback_header_value_length"),
        "pattern": HEADER_VALUE_PATTERN.pattern,
    },
)
_REQUIRED_APPROVALS = schema_only(minimum=1, maximum=default_setting("max_required_approvals"))


class PreviewIn(BaseModel):
    """What the approver should look at, shown on the request page by its kind."""

    model_config = ConfigDict(extra="ignore")

    kind: PreviewKind = Field(
        description="How the page shows `content`: `text` as written, `markdown` rendered "
        "(raw HTML shown as text), `diff` a unified diff with added and removed lines "
        "marked, `sql` highlighted, `json` a tree, `email` its From, To, Subject and body."
    )
    content: str = Field(
        description="Always text. For `json`: a JSON text (no duplicate keys, no NaN, "
        "nested at most 32 levels). For `email`: header lines (`From: ...`, `To: ...`, "
        "`Subject: ...`, each once, other headers allowed), a blank line, then the body."
    )

    @field_validator("content")
    @classmethod
    def _content(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind is not None:
            try:
                check_content(kind, value, settings_from(info.context).max_metadata_depth)
            except PreviewError as exc:
                raise ValueError(str(exc)) from None
        return value


class CreateApprovalRequest(BaseModel):
    """Body of ``POST /api/v1/approvals``."""

    model_config = ConfigDict(extra="ignore")

    title: Annotated[str, _TITLE] = Field(description="Short description of what needs approval.")
    description: Annotated[str, _DESCRIPTION] = Field(
        description="Detailed context for the approver."
    )
    priority: Priority
    callback_url: Annotated[str, schema_only(format="uri", maxLength=MAX_URL_LENGTH)] | None = (
        Field(
            None,
            description="Where the decision is POSTed: http or https (https only in "
            "production); private and loopback addresses are refused in production.",
        )
    )
    callback_headers: Annotated[dict[str, str], _CALLBACK_HEADERS] | None = Field(
        None,
        description="Extra headers added to every callback attempt; never echoed. Names are "
        "HTTP tokens, values at most 1 KiB; signoff's own delivery headers cannot be set.",
    )
    action_type: Annotated[str, _ACTION_TYPE] | None = Field(
        None, description="Dotted label, e.g. `deploy.production`."
    )
    source: Annotated[str, _LABEL] | None = Field(
        None, description="Name of the calling integration."
    )
    metadata: dict[str, Any] | None = Field(
        None,
        description="Passed through to the callback unchanged: at most 64 KiB as JSON, "
        "nested at most 32 levels deep, integers within 64 bits, no NUL characters.",
    )
    preview: PreviewIn | None = Field(
        None,
        description="What the approver should look at (a diff, an SQL statement, the mail "
        "to be sent), shown on the request page by its kind and excerpted in notifications. "
        "At most 256 KiB as JSON by default (`SIGNOFF_MAX_PREVIEW_BYTES`).",
    )
    arguments: dict[str, Any] | None = Field(
        None,
        description="The exact parameters the action will run with; the receipt names "
        "their hash (`arguments_hash`). At most 64 KiB as JSON (configurable), nested as "
        "`metadata`, integers within 2^53 - 1 (RFC 8785).",
    )
    arguments_schema: dict[str, Any] | None = Field(
        None,
        description="A JSON Schema (draft 2020-12) the arguments must satisfy. References "
        "outside the schema (a `$ref` not starting with `#`) are refused; nothing is "
        "fetched. Failures name JSON pointers in `details.fields`.",
    )
    receipt_ttl_seconds: Count | None = Field(
        None,
        description="How long the receipt issued on approval is valid: default 900, at "
        "most 86400 (configurable).",
    )
    expires_at: datetime | None = Field(None, description="RFC 3339 with a time zone; future.")
    required_approvals: Annotated[Count, _REQUIRED_APPROVALS] = Field(
        1, description="Distinct approvals needed (1 to 20)."
    )
    is_sequential: StrictBool = False
    idempotency_key: Annotated[str, _IDEMPOTENCY_KEY] | None = Field(
        None, description="Same key in the same org answers 200 with the first request."
    )

    @model_validator(mode="before")
    @classmethod
    def _absent_means_default(cls, data: Any, info: ValidationInfo) -> Any:
        data = _drop_absent(data, _OPTIONAL_CREATE_FIELDS)
        if settings_from(info.context).compat_legacy_clients:
            data = _legacy_defaults(data)
        return data

    @field_validator("title")
    @classmethod
    def _title(cls, value: str, info: ValidationInfo) -> str:
        return _require_text(value, "title", settings_from(info.context).max_title_length)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str, info: ValidationInfo) -> str:
        settings = settings_from(info.context)
        if value == "" and settings.compat_legacy_clients:
            return value
        return _require_text(value, "description", settings.max_description_length)

    @field_validator("action_type")
    @classmethod
    def _action_type(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if len(value) > settings_from(info.context).max_label_length:
            raise ValueError("is too long")
        if not ACTION_TYPE_PATTERN.fullmatch(value):
            raise ValueError("must be a dotted label of a-z, 0-9, '_' and '-', e.g. deploy.prod")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and len(value) > settings_from(info.context).max_label_length:
            raise ValueError("is too long")
        return value

    @field_validator("idempotency_key")
    @classmethod
    def _idempotency_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        limit = settings_from(info.context).max_idempotency_key_length
        if value is not None and len(value) > limit:
            raise ValueError(f"must be at most {limit} characters")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        settings = settings_from(info.context)
        return _json_object(value, settings.max_metadata_depth, settings.max_metadata_bytes)

    @field_validator("arguments")
    @classmethod
    def _arguments(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        settings = settings_from(info.context)
        value = _json_object(value, settings.max_metadata_depth, settings.max_arguments_bytes)
        arguments_hash(value)  # raises what RFC 8785 cannot encode
        return value

    @field_validator("preview")
    @classmethod
    def _preview(cls, value: PreviewIn | None, info: ValidationInfo) -> PreviewIn | None:
        if value is None:
            return None
        limit = settings_from(info.context).max_preview_bytes
        if len(orjson.dumps(value.model_dump())) > limit:
            raise ValueError(f"must be at most {limit} bytes as JSON")
        return value

    @field_validator("arguments_schema")
    @classmethod
    def _arguments_schema(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        settings = settings_from(info.context)
        return _json_object(value, settings.max_metadata_depth, settings.max_arguments_bytes)

    @field_validator("receipt_ttl_seconds")
    @classmethod
    def _receipt_ttl(cls, value: int | None, info: ValidationInfo) -> int | None:
        limit = settings_from(info.context).receipt_ttl_max_seconds
        if value is not None and not 1 <= value <= limit:
            raise ValueError(f"must be between 1 and {limit}")
        return value

    @model_validator(mode="after")
    def _arguments_satisfy_schema(self) -> CreateApprovalRequest:
        if self.arguments_schema is not None:
            check_against_schema(self.arguments, self.arguments_schema)
        return self

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return validate_callback_url(value, https_only=settings_from(info.context).is_production)

    @field_validator("callback_headers")
    @classmethod
    def _callback_headers(
        cls, value: dict[str, str] | None, info: ValidationInfo
    ) -> dict[str, str] | None:
        if not value:
            return None
        settings = settings_from(info.context)
        if len(value) > settings.max_callback_headers:
            raise ValueError(f"at most {settings.max_callback_headers} headers")
        for name, header_value in value.items():
            if not HEADER_NAME_PATTERN.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid header name")
            if name.lower() in RESERVED_CALLBACK_HEADERS:
                raise ValueError(f"{name!r} is set by signoff and cannot be overridden")
            if len(header_value) > settings.max_callback_header_value_length:
                raise ValueError(f"the value of {name!r} is too long")
            if not HEADER_VALUE_PATTERN.fullmatch(header_value):
                raise ValueError(
                    f"the value of {name!r} must be visible ASCII characters, with spaces "
                    "or tabs only between them (RFC 9110)"
                )
        return value

    @field_validator("expires_at", mode="before")
    @classmethod
    def _expires_at_parse(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse_timestamp(value)
            except ValueError as exc:
                raise ValueError(
                    f"must be an RFC 3339 timestamp with a time zone ({exc})"
                ) from None
        raise ValueError("must be an RFC 3339 timestamp string, e.g. 2030-01-01T12:00:00Z")

    @field_validator("expires_at")
    @classmethod
    def _expires_at_future(cls, value: datetime | None) -> datetime | None:
        if value is not None and value <= utcnow():
            raise ValueError("must lie in the future")
        return value

    @field_validator("required_approvals")
    @classmethod
    def _required_approvals(cls, value: int, info: ValidationInfo) -> int:
        limit = settings_from(info.context).max_required_approvals
        if not 1 <= value <= limit:
            raise ValueError(f"must be between 1 and {limit}")
        return value


_OPTIONAL_CREATE_FIELDS = frozenset(
    name for name, f in CreateApprovalRequest.model_fields.items() if not f.is_required()
)


class DecideApprovalRequest(BaseModel):
    """Body of ``PATCH /api/v1/approvals/:id``."""

    model_config = ConfigDict(extra="ignore")

    decision: Literal["approve", "reject"]
    comment: Annotated[str, _COMMENT] | None = Field(
        None, description="Stored in the audit trail and sent in the callback."
    )
    source: Annotated[str, _LABEL] | None = None
    arguments: dict[str, Any] | None = Field(
        None,
        description="Approve with edits: the arguments the action is to run with instead "
        'of the request\'s. Only beside `decision: "approve"`, only on a request with an '
        "`arguments_schema` (else 400 `EDITS_NOT_ALLOWED`), and they must satisfy it (else "
        "400 `VALIDATION_ERROR` naming each failing JSON pointer). Earlier approvals no "
        "longer count; the edit counts as this approval.",
    )

    standing: StandingGrantIn | None = Field(
        None,
        description='Only beside `decision: "approve"`: also approve, at once, later '
        "requests of the same connection and action type (whose arguments meet "
        "`arguments`) for `ttl_seconds` and/or `max_uses` of them (docs/policies.md, "
        "*Standing approvals*). 400 VALIDATION_ERROR, and no decision, for a critical "
        "request, one that needs more than one approval or has no action type, a "
        "constraint on an argument the request lacks (or that it does not meet), or "
        "past the org's caps.",
    )

    @model_validator(mode="before")
    @classmethod
    def _absent_means_default(cls, data: Any) -> Any:
        return _drop_absent(data, frozenset({"comment", "source", "arguments", "standing"}))

    @field_validator("arguments")
    @classmethod
    def _arguments(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        settings = settings_from(info.context)
        value = _json_object(value, settings.max_metadata_depth, settings.max_arguments_bytes)
        arguments_hash(value)  # raises what RFC 8785 cannot encode
        return value

    @model_validator(mode="after")
    def _edits_only_approve(self) -> DecideApprovalRequest:
        if self.arguments is not None and self.decision != "approve":
            raise ValidationFailed.for_field(
                "arguments", "only an approval may edit the arguments; a reject takes none"
            )
        if self.standing is not None and self.decision != "approve":
            raise ValidationFailed.for_field(
                "standing", "only an approval may grant a standing approval"
            )
        return self

    @field_validator("comment")
    @classmethod
    def _comment(cls, value: str | None, info: ValidationInfo) -> str | None:
        limit = settings_from(info.context).max_comment_length
        if value is not None and len(value) > limit:
            raise ValueError(f"must be at most {limit} characters")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and len(value) > settings_from(info.context).max_label_length:
            raise ValueError("is too long")
        return value


_PAGE_SIZE_QUERY = {"type": "integer", "minimum": 1, "maximum": 100}
_TIMESTAMP_QUERY = {"type": "string", "format": "date-time"}
_LABEL_QUERY = {"type": "string", "maxLength": default_setting("max_label_length")}


class RelayedDecision(DecideApprovalRequest):
    """A decision made from a notification (a one-click link, a Slack button). Built in
    code, never parsed from an API body: ``via`` goes into the audit event."""

    via: Literal["email", "slack", "teams", "discord"]


class ListApprovalsQuery(BaseModel):
    """Query of ``GET /api/v1/approvals``, declared once: the handler validates with it,
    the OpenAPI document lists its parameters (``query_parameters``) and ``filters()``
    gives the listing its ``ListFilters``. Unknown parameters are ignored."""

    model_config = ConfigDict(extra="ignore")

    page: Count = query_parameter(
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "Page number, from 1.", 1
    )
    cursor: str | None = query_parameter(
        {"type": "string", "format": "uuid"},
        "The `next_cursor` of the previous page: the page after it. Not with `page` or `search`.",
    )
    page_size: Count = query_parameter(_PAGE_SIZE_QUERY, "1 to 100, default 20.", 20)
    limit: Count | None = query_parameter(_PAGE_SIZE_QUERY, "Alias of page_size.")
    status: list[str] | None = query_parameter(
        {"type": "array", "items": {"type": "string", "enum": list(REQUEST_STATUSES)}},
        "One status, several (repeated), or a comma-separated list.",
    )
    priority: Priority | None = query_parameter(
        {"type": "string", "enum": ["low", "medium", "high", "critical"]}, "One priority."
    )
    action_type: str | None = query_parameter(_LABEL_QUERY, "Exactly this action type.")
    source: str | None = query_parameter(_LABEL_QUERY, "Exactly this source.")
    search: str | None = query_parameter(
        {"type": "string", "maxLength": 500},
        "Full-text search of title and description: every word must match, as a prefix, "
        "case-insensitively; punctuation and operators are ignored. Best matches first "
        "(title matches before description matches). A request's `number` alone finds it: "
        "`#12` that request only, `12` that request first, then the text's matches.",
    )
    created_after: datetime | None = query_parameter(_TIMESTAMP_QUERY, "RFC 3339; inclusive.")
    created_before: datetime | None = query_parameter(_TIMESTAMP_QUERY, "RFC 3339; exclusive.")
    decided_after: datetime | None = query_parameter(
        _TIMESTAMP_QUERY, "RFC 3339; inclusive. Expired requests count as decided at expiry."
    )
    decided_before: datetime | None = query_parameter(_TIMESTAMP_QUERY, "RFC 3339; exclusive.")
    assigned_to: str | None = query_parameter(
        {"type": "string", "anyOf": [{"enum": ["me"]}, {"format": "uuid"}]},
        "`me` (or a user id): pending requests waiting for that user's vote now: a step of "
        "theirs that is votable (in turn, for sequential chains), or a count-based request "
        "they have not voted on.",
    )

    def filters(self, caller: uuid.UUID, after: uuid.UUID | None = None) -> ListFilters:
        """The listing's filters; ``caller``: who ``assigned_to=me`` means; ``after``:
        the request a cursor names (the page after it)."""
        values = {name: getattr(self, name) for name in _FILTER_FIELDS}
        values["statuses"] = values.pop("status")
        values["assigned_to"] = caller if self.assigned_to == "me" else self.assigned_to_id
        return ListFilters(**values, after=after)

    @property
    def assigned_to_id(self) -> uuid.UUID | None:
        return uuid.UUID(self.assigned_to) if self.assigned_to not in (None, "me") else None

    @field_validator("assigned_to")
    @classmethod
    def _assigned_to(cls, value: str | None) -> str | None:
        if value is None or value == "me":
            return value
        try:
            uuid.UUID(value)
        except ValueError:
            raise ValueError("must be 'me' or a user id") from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if v not in (None, "")}
        # `limit` is an alias of `page_size` used by existing SDKs (decisions.md 13).
        if "page_size" not in data and "limit" in data:
            data["page_size"] = data.pop("limit")
        if isinstance(data.get("status"), str):
            data["status"] = [s.strip() for s in data["status"].split(",") if s.strip()]
        return data

    @field_validator("status")
    @classmethod
    def _status(cls, value: list[str] | None) -> list[str] | None:
        for status in value or ():
            if status not in REQUEST_STATUSES:
                raise ValueError(f"must be one of {', '.join(REQUEST_STATUSES)}")
        return value or None

    @field_validator("page")
    @classmethod
    def _page(cls, value: int) -> int:
        if not 1 <= value <= MAX_PAGE:
            raise ValueError(f"must be between 1 and {MAX_PAGE}")
        return value

    @field_validator("page_size")
    @classmethod
    def _page_size(cls, value: int) -> int:
        if not 1 <= value <= 100:
            raise ValueError("must be between 1 and 100")
        return value

    @field_validator(
        "created_after", "created_before", "decided_after", "decided_before", mode="before"
    )
    @classmethod
    def _timestamp(cls, value: Any) -> Any:
        # An unencoded "+01:00" in a query string arrives as " 01:00": take it as meant.
        text = _UNENCODED_PLUS_OFFSET.sub(r"+\1", str(value))
        try:
            return parse_timestamp(text)
        except ValueError as exc:
            raise ValueError(f"must be an RFC 3339 timestamp with a time zone ({exc})") from None

    @field_validator("search")
    @classmethod
    def _search(cls, value: str | None) -> str | None:
        if value is not None and len(value) > 500:
            raise ValueError("must be at most 500 characters")
        return value


# The fields of the query that are filters of the listing (the rest are paging).
_FILTER_FIELDS = tuple(
    name
    for name in ListApprovalsQuery.model_fields
    if name not in ("page", "page_size", "limit", "cursor")
)


class AddComment(BaseModel):
    model_config = ConfigDict(extra="ignore")

    body: Annotated[str, _COMMENT, schema_only(minLength=1, pattern=_NOT_BLANK)]

    @field_validator("body")
    @classmethod
    def _body(cls, value: str, info: ValidationInfo) -> str:
        return _require_text(value, "body", settings_from(info.context).max_comment_length)


# ---- Answers (documented in the OpenAPI document; rendered by json_answers.py) ----


class StepSummaryOut(BaseModel):
    id: uuid.UUID
    approval_request_id: uuid.UUID
    step_order: int = Field(ge=1)
    approver_id: uuid.UUID | None = Field(description="Null for a group's step.")
    status: Literal["pending", "approved", "rejected", "skipped"]
    decided_at: str | None
    decided_by: uuid.UUID | None
    comment: str | None
    # A group's step (a quorum) only; a person's step has none of these.
    group_id: uuid.UUID | None = Field(default=None, description="A group step only.")
    group_name: str | None = Field(default=None, description="A group step only.")
    required_approvals: int | None = Field(
        default=None, description="A group step only: distinct members who must approve."
    )
    current_approvals: int | None = Field(
        default=None, description="A group step only: distinct members who approved."
    )


class VoteOut(BaseModel):
    id: uuid.UUID
    user_id: uuid.UUID
    step_id: uuid.UUID | None
    decision: Literal["approve", "reject"]
    comment: str | None
    created_at: str


# The request as every read answers it, documented from the one declaration of its shape.
ApprovalRequestOut: type[BaseModel] = create_model(
    "ApprovalRequestOut",
    __doc__="An approval request, as every read, decision and cancellation answers it.",
    **{f.key: (f.annotation, Field(description=f.description)) for f in REQUEST_FIELDS},  # type: ignore[call-overload]
)


class ReceiptCountsOut(BaseModel):
    """What every read, lists included, says of a request's receipt."""

    receipt_issued: bool = Field(description="An approval issued a receipt.")
    receipt_uses: int = Field(ge=0, description="How many times it was redeemed.")


class ReceiptFieldsOut(ReceiptCountsOut):
    receipt: str | None = Field(
        description="The receipt the approval issued (a compact JWS, docs/receipts.md), "
        "for the connection that created the request and for admins; null for others "
        "and before approval. Never in lists."
    )


class ApprovalListItemOut(ApprovalRequestOut, ReceiptCountsOut):
    """A list item: the request, and whether a receipt was issued (never the receipt)."""


class ApprovalRequestDetailOut(ApprovalRequestOut, ReceiptFieldsOut):
    """The single read: the request with its chain and the votes cast so far."""

    steps: list[StepSummaryOut]
    votes: list[VoteOut]


class DecisionOut(ApprovalRequestOut, ReceiptCountsOut):
    receipt: str | None = Field(
        description="Always null in a decision's or cancellation's answer: an approval "
        "sets `receipt_issued: true`, and the receipt is signed on read, shown by "
        "`GET /api/v1/approvals/:id` (and its long poll), the decision callback, the "
        "client library and the MCP tools (docs/receipts.md)."
    )
    callback_delivered: bool


class PaginationOut(BaseModel):
    page: int
    page_size: int
    total: int = Field(
        description="Matching requests, counted exactly up to 10,000; past that, 10,000 "
        "(see `total_is_exact`)."
    )
    total_pages: int


class ApprovalListOut(BaseModel):
    data: list[ApprovalListItemOut]
    pagination: PaginationOut
    total_is_exact: bool = Field(
        description="False when counting stopped at 10,000: there are more matches."
    )
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the page after this one; null on a page that is "
        "not full (the last) and when searching."
    )
    total: int
    page: int
    page_size: int


class CommentOut(BaseModel):
    id: uuid.UUID
    approval_request_id: uuid.UUID
    request_id: uuid.UUID
    user_id: uuid.UUID
    body: str
    created_at: str


class CommentListOut(BaseModel):
    data: list[CommentOut]


class AuditEventOut(BaseModel):
    id: uuid.UUID
    request_id: uuid.UUID
    type: str
    actor_id: uuid.UUID | None
    data: dict[str, Any]
    created_at: str


class AuditEventListOut(BaseModel):
    data: list[AuditEventOut]
