"""``signoff org``: organizations."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from signoff.cli.common import (
    JsonFlag,
    emit,
    emit_list,
    fail,
    run_in_transaction,
)
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.models import Organization
from signoff.orgs import service as orgs_service
from signoff.orgs.settings import parse_changes, settings_of
from signoff.passkeys import service as passkeys_service
from signoff.unit_of_work import UnitOfWork

org_app = typer.Typer(help="Organizations.", no_args_is_help=True)

OrgArgument = Annotated[str, typer.Argument(help="Organization id or name.")]


def org_to_dict(org: Organization) -> dict[str, Any]:
    return {
        "id": str(org.id),
        "name": org.name,
        "emergency_stop": org.emergency_stop,
        "created_at": format_timestamp(org.created_at),
    }


@org_app.command("create")
def org_create(name: str, as_json: JsonFlag = False) -> None:
    """Create an organization (names are unique, ignoring case).

    The alternative to the setup link that `signoff serve` prints on an empty database.
    """

    async def action(_: AppContext, uow: UnitOfWork) -> Organization:
        return await orgs_service.create_org(uow.orgs, name, utcnow())

    org = run_in_transaction(action)
    emit(as_json, {"id": str(org.id), "name": org.name}, f"created organization {org.id}")


@org_app.command("list")
def org_list(as_json: JsonFlag = False) -> None:
    """List organizations, oldest first."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        return [org_to_dict(o) for o in await uow.orgs.list_orgs()]

    orgs = run_in_transaction(action)
    emit_list(
        as_json,
        orgs,
        ("id", "name", "emergency stop", "created"),
        lambda org: (
            org["id"],
            org["name"],
            "on" if org["emergency_stop"] else "off",
            org["created_at"],
        ),
    )


@org_app.command("rename")
def org_rename(org: OrgArgument, new_name: str, as_json: JsonFlag = False) -> None:
    """Rename an organization."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        found = await orgs_service.resolve_org(uow.orgs, org)
        await orgs_service.rename_org(uow.orgs, found, new_name)
        return org_to_dict(found)

    renamed = run_in_transaction(action)
    emit(as_json, renamed, f"renamed organization {renamed['id']} to {renamed['name']}")


@org_app.command("passkeys")
def org_passkeys(
    org: OrgArgument,
    value: Annotated[
        str | None,
        typer.Argument(help="off, critical or all; leave out to show the setting."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show or set which decisions need the approver's passkey (docs/passkeys.md)."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        found = await orgs_service.resolve_org(uow.orgs, org)
        if value is not None:
            await passkeys_service.set_passkey_for(uow.passkeys, found.id, value, None, utcnow())
        setting = await passkeys_service.get_passkey_for(uow.passkeys, found.id)
        return {"id": str(found.id), "passkey_for": setting}

    result = run_in_transaction(action)
    emit(as_json, result, f"passkey_for: {result['passkey_for']}")


@org_app.command("settings")
def org_settings(
    org: OrgArgument,
    changes: Annotated[
        list[str] | None,
        typer.Argument(
            help="NAME=VALUE pairs to change (self_approval=forbid, passkey_for=critical); "
            "leave out to show the settings."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show or change the org's settings, as GET/PATCH /api/v1/org/settings do
    (docs/policies.md: four-eyes; docs/passkeys.md)."""
    wanted = _setting_pairs(changes or [])

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        found = await orgs_service.resolve_org(uow.orgs, org)
        if wanted:
            checked = parse_changes(wanted)
            await uow.orgs.update_settings(found.id, checked, None, utcnow())
            await uow.session.refresh(found)
        return settings_of(found)

    document = run_in_transaction(action)
    emit(as_json, document, "\n".join(f"{name}: {value}" for name, value in document.items()))


def _setting_pairs(pairs: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise fail(f"{pair!r} is not NAME=VALUE (self_approval=forbid, say)")
        parsed[name.strip()] = value.strip()
    return parsed


@org_app.command("delete")
def org_delete(
    org: OrgArgument,
    with_data: Annotated[
        bool,
        typer.Option(
            "--with-data",
            help="Also delete its approval requests, their history and its audit trail.",
        ),
    ] = False,
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            metavar="NAME",
            help="With --with-data: the organization's name, instead of typing it when asked.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Delete an organization with its users, connections and settings.

    One that has approval requests is refused unless --with-data is given and its name
    typed (or given with --confirm).
    """

    async def look(_: AppContext, uow: UnitOfWork) -> tuple[dict[str, Any], bool]:
        found = await orgs_service.resolve_org(uow.orgs, org)
        return org_to_dict(found), await uow.orgs.org_has_requests(found.id)

    target, has_requests = run_in_transaction(look)
    if has_requests and not with_data:
        raise fail(
            f"the organization {target['name']!r} has approval requests; deleting it "
            "deletes them and their audit trail too. Add --with-data to do so."
        )
    if with_data:
        typed = confirm
        if typed is None:
            typed = typer.prompt(
                f"This deletes {target['name']!r} and all its data. Type its name to confirm",
                err=True,
            )
        if typed.strip() != target["name"]:
            raise fail("the name typed does not match; nothing was deleted")

    async def delete(_: AppContext, uow: UnitOfWork) -> None:
        # By id: the org the confirmation named, even if another took its old name since.
        found = await orgs_service.resolve_org(uow.orgs, target["id"])
        await orgs_service.delete_org(uow.orgs, found, with_data=with_data)

    run_in_transaction(delete)
    emit(
        as_json,
        {**target, "deleted": True},
        f"deleted organization {target['id']} ({target['name']})",
    )
