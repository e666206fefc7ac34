"""``signoff user``: the users of an organization."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer

from signoff.cli.common import JsonFlag, OrgOption, emit, emit_list, fail, run_in_transaction
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.models import Connection, User
from signoff.orgs import service as orgs_service
from signoff.orgs.delegation import (
    DelegationIn,
    clear_delegation,
    delegation_to_dict,
    set_delegation,
)
from signoff.unit_of_work import UnitOfWork

user_app = typer.Typer(help="Users of an organization.", no_args_is_help=True)


def user_to_dict(user: User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "org_id": str(user.org_id),
        "email": user.email,
        "name": user.name,
        "role": user.role,
        "has_password": user.password_hash is not None,
        "created_at": format_timestamp(user.created_at),
        "deactivated_at": format_timestamp(user.deactivated_at),
    }


@user_app.command("create")
def user_create(
    org: OrgOption,
    email: Annotated[str, typer.Option(help="Unique within the organization.")],
    name: Annotated[str, typer.Option(help="Display name.")],
    role: Annotated[str, typer.Option(help="admin or member.")] = "member",
    password: Annotated[
        str | None, typer.Option(help="Dashboard password (argon2-hashed; 8+ characters).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a user."""
    if role not in ("admin", "member"):
        raise fail("--role must be admin or member", 2)
    checked_role: Literal["admin", "member"] = "admin" if role == "admin" else "member"

    async def action(_: AppContext, uow: UnitOfWork) -> User:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        return await orgs_service.create_user(
            uow.orgs,
            org_row.id,
            email=email,
            name=name,
            role=checked_role,
            password=password,
            now=utcnow(),
        )

    user = run_in_transaction(action)
    emit(as_json, user_to_dict(user), f"created user {user.id} ({user.email}, {user.role})")


@user_app.command("list")
def user_list(org: OrgOption, as_json: JsonFlag = False) -> None:
    """List the users of an organization."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        return [user_to_dict(u) for u in await orgs_service.list_users(uow.orgs, org_row.id)]

    users = run_in_transaction(action)
    emit_list(
        as_json,
        users,
        ("id", "email", "name", "role", "deactivated"),
        lambda user: (
            user["id"],
            user["email"],
            user["name"],
            user["role"],
            user["deactivated_at"] or "",
        ),
    )


@user_app.command("deactivate")
def user_deactivate(
    user: Annotated[str, typer.Argument(help="User id or e-mail.")],
    org: OrgOption,
    as_json: JsonFlag = False,
) -> None:
    """Deactivate a user, as the dashboard's Deactivate: no more sign-in, their sessions
    and OAuth tokens end now, and the connections they own go on without their authority
    (no decisions, votes or admin acts) until transferred."""

    async def action(_: AppContext, uow: UnitOfWork) -> tuple[User, list[Connection]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        found = await orgs_service.resolve_user(uow.orgs, org_row.id, user)
        await orgs_service.deactivate_user(uow.oauth, found, utcnow())
        return found, list(await orgs_service.owned_connections(uow.orgs, found))

    found, owned = run_in_transaction(action)
    said = f"deactivated user {found.id} ({found.email})"
    if owned:
        names = ", ".join(c.name for c in owned)
        said += (
            f"\ntheir connections ({names}) keep working without their authority (no "
            "decisions, votes or admin acts); give each another owner with "
            "`signoff connection transfer ID --org ORG --owner USER`"
        )
    data = {**user_to_dict(found), "connections": [str(c.id) for c in owned]}
    emit(as_json, data, said)


@user_app.command("delegation")
def user_delegation(
    user: Annotated[str, typer.Argument(help="User id or e-mail.")],
    org: OrgOption,
    to: Annotated[
        str | None, typer.Option("--to", help="Delegate: user id or e-mail of the org.")
    ] = None,
    until: Annotated[
        datetime | None,
        typer.Option(help="Away until (ISO 8601; UTC unless it names a zone)."),
    ] = None,
    since: Annotated[
        datetime | None,
        typer.Option("--from", help="Away from (ISO 8601); default now."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="End the delegation.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show, set (--to and --until) or end (--clear) a user's out-of-office delegation, as
    PUT /api/v1/me/delegation does for oneself (docs/policies.md)."""
    if clear and (to or until or since):
        raise fail("--clear takes no --to, --until or --from")
    if (to is None) != (until is None) or (since is not None and to is None):
        raise fail("set a delegation with both --to and --until (and --from if not now)")

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        found = await orgs_service.resolve_user(uow.orgs, org_row.id, user)
        now = utcnow()
        if clear:
            clear_delegation(found)
        elif to is not None and until is not None:
            delegate = await orgs_service.resolve_user(uow.orgs, org_row.id, to)
            payload = DelegationIn(
                away_from=_aware(since) if since else None,
                away_until=_aware(until),
                delegate_id=delegate.id,
            )
            await set_delegation(uow.orgs, found, payload, now)
        standing_in = (
            await uow.orgs.get_user(org_row.id, found.delegate_id) if found.delegate_id else None
        )
        return {"user_id": str(found.id), **delegation_to_dict(found, standing_in, now)}

    answer = run_in_transaction(action)
    if answer["delegate_id"] is None:
        emit(as_json, answer, "no delegation")
    else:
        emit(
            as_json,
            answer,
            f"away {answer['away_from']} to {answer['away_until']}, delegate "
            f"{answer['delegate_name']} ({answer['delegate_id']})"
            + (" (away now)" if answer["away_now"] else ""),
        )


def _aware(moment: datetime) -> datetime:
    """A time typed without a zone is UTC, as every time signoff prints is."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@user_app.command("reactivate")
def user_reactivate(
    user: Annotated[str, typer.Argument(help="User id or e-mail.")],
    org: OrgOption,
    as_json: JsonFlag = False,
) -> None:
    """Let a deactivated user sign in again; their connections' keys act with their
    authority again. Ended sessions and revoked OAuth tokens stay ended."""

    async def action(_: AppContext, uow: UnitOfWork) -> User:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        found = await orgs_service.resolve_user(uow.orgs, org_row.id, user)
        orgs_service.reactivate_user(found, utcnow())
        await uow.session.flush()
        return found

    found = run_in_transaction(action)
    emit(as_json, user_to_dict(found), f"reactivated user {found.id} ({found.email})")
