"""Shapes of the group endpoints (the OpenAPI document's schemas; docs/groups.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from signoff.groups.service import MAX_MEMBERS, MAX_NAME_LENGTH

NAME_DOC = f"Unique in the org, ignoring case; 1 to {MAX_NAME_LENGTH} characters."


class GroupCreateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description=NAME_DOC, json_schema_extra={"maxLength": MAX_NAME_LENGTH})
    member_ids: list[str] = Field(
        default_factory=list,
        description="Users of the org to add (active ones only).",
        json_schema_extra={"maxItems": MAX_MEMBERS},
    )


class GroupRenameIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description=NAME_DOC, json_schema_extra={"maxLength": MAX_NAME_LENGTH})


class GroupMembersIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_ids: list[str] = Field(
        description="The group's members from now on (active users of the org).",
        json_schema_extra={"maxItems": MAX_MEMBERS},
    )


class GroupMemberIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(description="An active user of the org.")


class GroupSummaryOut(BaseModel):
    id: str
    name: str
    member_count: int
    created_at: str
    updated_at: str


class GroupListOut(BaseModel):
    data: list[GroupSummaryOut]


class GroupMemberOut(BaseModel):
    id: str
    email: str
    name: str
    active: bool = Field(
        description="False once the user is deactivated: they stay listed, "
        "but a quorum or a chain step naming the group no longer counts them."
    )


class GroupOut(GroupSummaryOut):
    members: list[GroupMemberOut]
