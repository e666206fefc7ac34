"""``signoff group list|create|rename|delete|add|remove --org ORG`` (docs/groups.md).

The operator's changes are audit events of the org without an actor, as every CLI change.
A group is named by its id or its name; a person by their id or e-mail.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from signoff.cli.common import JsonFlag, OrgOption, emit, emit_list, run_in_transaction
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.groups import service
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork

group_app = typer.Typer(
    help="Groups: named sets of an organization's people.", no_args_is_help=True
)

GroupArgument = Annotated[str, typer.Argument(help="Group id or name.")]
UserArgument = Annotated[str, typer.Argument(help="User id or e-mail.")]


def _members_text(group: dict[str, Any]) -> str:
    names = ", ".join(m["email"] for m in group["members"]) or "no members"
    return f"{group['name']} ({group['id']}): {names}"


@group_app.command("list")
def group_list(org: OrgOption, as_json: JsonFlag = False) -> None:
    """List the org's groups, with how many members each has."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        return await service.list_groups(uow.groups, row.id)

    groups = run_in_transaction(action)
    emit_list(
        as_json,
        groups,
        ("id", "name", "members"),
        lambda g: (g["id"], g["name"], str(g["member_count"])),
    )


@group_app.command("create")
def group_create(
    name: Annotated[str, typer.Argument(help="Unique in the org, ignoring case.")],
    org: OrgOption,
    member: Annotated[
        list[str] | None, typer.Option("--member", help="User id or e-mail; repeat for more.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a group, with its first members."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        users = [await orgs_service.resolve_user(uow.orgs, row.id, m) for m in member or []]
        ids = [str(u.id) for u in users]
        return await service.create_group(uow.groups, row.id, name, ids, None, utcnow())

    group = run_in_transaction(action)
    emit(as_json, group, "created group " + _members_text(group))


@group_app.command("rename")
def group_rename(
    group: GroupArgument,
    name: Annotated[str, typer.Argument(help="The new name.")],
    org: OrgOption,
    as_json: JsonFlag = False,
) -> None:
    """Rename a group."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        found = await service.resolve_group(uow.groups, row.id, group)
        return await service.rename_group(uow.groups, row.id, found.id, name, None, utcnow())

    renamed = run_in_transaction(action)
    emit(as_json, renamed, f"renamed group {renamed['id']} to {renamed['name']}")


@group_app.command("delete")
def group_delete(group: GroupArgument, org: OrgOption, as_json: JsonFlag = False) -> None:
    """Delete a group (its members stay users of the org)."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        found = await service.resolve_group(uow.groups, row.id, group)
        gone = await service.delete_group(uow.groups, row.id, found.id, None, utcnow())
        return {"id": str(gone.id), "name": gone.name, "deleted": True}

    gone = run_in_transaction(action)
    emit(as_json, gone, f"deleted group {gone['name']} ({gone['id']})")


@group_app.command("add")
def group_add(
    group: GroupArgument, user: UserArgument, org: OrgOption, as_json: JsonFlag = False
) -> None:
    """Add a person to a group (an active user of the org)."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        found = await service.resolve_group(uow.groups, row.id, group)
        person = await orgs_service.resolve_user(uow.orgs, row.id, user)
        return await service.add_member(
            uow.groups, row.id, found.id, str(person.id), None, utcnow()
        )

    changed = run_in_transaction(action)
    emit(as_json, changed, _members_text(changed))


@group_app.command("remove")
def group_remove(
    group: GroupArgument, user: UserArgument, org: OrgOption, as_json: JsonFlag = False
) -> None:
    """Remove a person from a group."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        repo = uow.groups
        found = await service.resolve_group(repo, row.id, group)
        person = await orgs_service.resolve_user(uow.orgs, row.id, user)
        await service.remove_member(repo, row.id, found.id, person.id, None, utcnow())
        return await service.read_group(repo, row.id, found.id)

    changed = run_in_transaction(action)
    emit(as_json, changed, _members_text(changed))
