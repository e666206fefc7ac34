"""The keys of a request's JSON, as the API answers it, declared once.

``REQUEST_FIELDS`` lists every key of a request as the API answers it, in order: its JSON
key, the ``RequestRecord`` field it comes from, its kind, and its type and description
for the OpenAPI document. Three renderings are derived from it and nothing else:

- ``json_answers.request_to_dict``: a ``RequestRecord`` to a dict (single reads, decisions,
  cancellations, replays);
- ``json_in_sql.request_json``: the same object built by the database, one SQL expression
  per dialect (list pages);
- ``schemas.ApprovalRequestOut``: the answer model of the OpenAPI document.

``tests/approvals/test_json_in_sql.py`` proves the first two agree byte for byte on both
databases, and ``tests/approvals/test_json_fields.py`` that the model documents exactly these
keys. Adding a field: the table's column (``models/approvals.py``, ``RequestRecord``), a
migration, and one line here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from signoff.approvals.previews import PreviewKind
from signoff.approvals.state import RequestStatus

Priority = Literal["low", "medium", "high", "critical"]

# How a value is written in JSON: ``id`` a UUID as text, ``time`` RFC 3339 UTC with
# milliseconds and ``Z``, ``flag`` a boolean, ``object`` a JSON object ({} when absent),
# ``json`` a JSON value or null, ``plain`` as stored (text and numbers).
Kind = Literal["id", "time", "flag", "object", "json", "plain"]


class PreviewOut(BaseModel):
    """A request's preview, as given at create."""

    kind: PreviewKind
    content: str


@dataclass(frozen=True)
class RequestField:
    key: str
    kind: Kind
    annotation: Any
    description: str
    record_field: str = ""  # the RequestRecord field, when it is not ``key``
    # A pending request past its deadline reads as expired at once (state.is_past_expiry):
    # "status" reads "expired", "deadline" reads the deadline.
    when_expired: Literal["status", "deadline"] | None = None

    @property
    def source(self) -> str:
        return self.record_field or self.key


REQUEST_FIELDS: tuple[RequestField, ...] = (
    RequestField("id", "id", uuid.UUID, "Assigned by the service."),
    RequestField(
        "number",
        "plain",
        int,
        "The request's number in its organization, shown as `#1234`: given at create, "
        "never shared by two of the org's requests, never reused. Search finds it.",
    ),
    RequestField("org_id", "id", uuid.UUID, "The owning organization."),
    RequestField("connection_id", "id", uuid.UUID, "The connection that created it."),
    RequestField("title", "plain", str, "What needs approval."),
    RequestField("description", "plain", str, "Context for the approver."),
    RequestField(
        "status",
        "plain",
        RequestStatus,
        "A pending request past `expires_at` reads `expired` at once.",
        when_expired="status",
    ),
    RequestField("priority", "plain", Priority, "low, medium, high or critical."),
    RequestField("action_type", "plain", str | None, "A dotted label, e.g. `deploy.prod`."),
    RequestField("source", "plain", str | None, "The calling integration."),
    RequestField(
        "metadata",
        "object",
        dict[str, Any],
        "Passed through unchanged to the callback.",
        record_field="metadata_",
    ),
    RequestField(
        "preview",
        "json",
        PreviewOut | None,
        "What the approver is shown, as given at create; null without one.",
    ),
    RequestField(
        "preview_hash",
        "plain",
        str | None,
        '`"sha-256:"` and the unpadded base64url SHA-256 of the preview object in RFC 8785 '
        "canonical form; null without a preview.",
    ),
    RequestField("callback_url", "plain", str | None, "Where the decision is POSTed."),
    RequestField("required_approvals", "plain", int, "Approvals needed (the steps, if any)."),
    RequestField("current_approvals", "plain", int, "Approvals so far."),
    RequestField("is_sequential", "flag", bool, "Steps are voted in order."),
    RequestField("idempotency_key", "plain", str | None, "As given at create."),
    RequestField("created_at", "time", str, "RFC 3339, UTC."),
    RequestField("updated_at", "time", str, "RFC 3339, UTC."),
    RequestField("expires_at", "time", str | None, "RFC 3339, UTC."),
    RequestField(
        "decided_at",
        "time",
        str | None,
        "When it left pending; for an expired request, its deadline.",
        when_expired="deadline",
    ),
    RequestField("decided_by", "id", uuid.UUID | None, "The deciding user; null on expiry."),
    RequestField("decided_by_name", "plain", str | None, "Their name, as it was then."),
    RequestField("decision_comment", "plain", str | None, "The deciding comment."),
    RequestField("cancelled_at", "time", str | None, "RFC 3339, UTC."),
    RequestField("comments_count", "plain", int, "Comments on the request."),
    RequestField(
        "auto_approved",
        "flag",
        bool,
        "Approved at create by a policy rule or a standing approval rather than a person.",
    ),
    RequestField(
        "standing_approval_id",
        "id",
        uuid.UUID | None,
        "The standing approval that approved it at create (docs/policies.md); null otherwise.",
    ),
    RequestField(
        "arguments", "object", dict[str, Any], "What the action runs with ({} when none)."
    ),
    RequestField(
        "arguments_hash",
        "plain",
        str,
        '`"sha-256:"` + base64url (no padding) of the SHA-256 of the arguments in RFC 8785 '
        "form; that of `{}` without arguments. The receipt names it.",
    ),
    RequestField("arguments_edited", "flag", bool, "Changed by an approver; false until then."),
    RequestField(
        "original_arguments_hash",
        "plain",
        str | None,
        "The hash of the arguments as created, once an approver edited them; null until then.",
    ),
)
