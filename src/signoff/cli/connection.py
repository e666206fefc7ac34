"""``signoff connection``: API keys and webhook secrets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated, Any, TypeVar

import typer

from signoff.cli.common import JsonFlag, OrgOption, emit, emit_list, run_in_transaction
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.models import Connection, User
from signoff.orgs import service as orgs_service
from signoff.orgs.schemas import connection_to_dict
from signoff.unit_of_work import UnitOfWork

T = TypeVar("T")

connection_app = typer.Typer(
    help="Connections: API keys and webhook secrets.", no_args_is_help=True
)


@connection_app.command("create")
def connection_create(
    org: OrgOption,
    owner: Annotated[str, typer.Option(help="User id or e-mail the key acts as.")],
    name: Annotated[str, typer.Option(help="A name for the integration.")],
    rate_limit: Annotated[
        int | None, typer.Option(help="Requests per hour (default SIGNOFF_RATE_LIMIT_DEFAULT).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a connection; prints its API key and webhook secret once."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> orgs_service.IssuedConnection:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        owner_row = await orgs_service.resolve_user(uow.orgs, org_row.id, owner)
        return await orgs_service.create_connection(
            uow.orgs,
            ctx.box,
            ctx.settings,
            org_row.id,
            owner=owner_row,
            name=name,
            rate_limit=rate_limit,
            now=utcnow(),
        )

    issued = run_in_transaction(action)
    data = {
        **connection_to_dict(issued.connection),
        "api_key": issued.api_key,
        "webhook_secret": issued.webhook_secret,
    }
    emit(
        as_json,
        data,
        f"created connection {issued.connection.id}\n"
        f"API key (shown once):        {issued.api_key}\n"
        f"webhook secret (shown once): {issued.webhook_secret}",
    )


@connection_app.command("list")
def connection_list(org: OrgOption, as_json: JsonFlag = False) -> None:
    """List connections (never their secrets)."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        rows = await orgs_service.list_connections(uow.orgs, org_row.id)
        return [connection_to_dict(c) for c in rows]

    connections = run_in_transaction(action)
    emit_list(
        as_json,
        connections,
        ("id", "name", "key", "rate limit", "revoked"),
        lambda c: (
            c["id"],
            c["name"],
            c["api_key_prefix"] + "…",
            str(c["rate_limit"]),
            c["revoked_at"] or "",
        ),
    )


def _change_connection(
    org: str, connection_id: str, change: Callable[[AppContext, Connection], Awaitable[T]]
) -> tuple[Connection, T]:
    """Apply ``change`` to one connection of the organization, in one transaction."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> tuple[Connection, T]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        connection = await orgs_service.get_connection(uow.orgs, org_row.id, connection_id)
        result = await change(ctx, connection)
        await uow.session.flush()
        return connection, result

    return run_in_transaction(action)


@connection_app.command("revoke")
def connection_revoke(connection_id: str, org: OrgOption, as_json: JsonFlag = False) -> None:
    """Revoke a connection: its API key answers 401 from now on."""

    async def change(_: AppContext, connection: Connection) -> None:
        await orgs_service.revoke_connection(connection, utcnow())

    connection, _ = _change_connection(org, connection_id, change)
    emit(as_json, connection_to_dict(connection), f"revoked connection {connection.id}")


@connection_app.command("rotate-secret")
def connection_rotate_secret(
    connection_id: str,
    org: OrgOption,
    grace_hours: Annotated[
        float, typer.Option(help="How long the old secret keeps signing beside the new one.")
    ] = 24.0,
    as_json: JsonFlag = False,
) -> None:
    """Issue a new webhook secret (shown once); the old one signs too during the grace period."""

    async def change(ctx: AppContext, connection: Connection) -> str:
        grace = timedelta(hours=grace_hours)
        return await orgs_service.rotate_webhook_secret(connection, ctx.box, grace, utcnow())

    connection, secret = _change_connection(org, connection_id, change)
    data = {
        **connection_to_dict(connection),
        "webhook_secret": secret,
        "previous_secret_expires_at": format_timestamp(
            connection.previous_webhook_secret_expires_at
        ),
    }
    emit(as_json, data, f"new webhook secret (shown once): {secret}")


@connection_app.command("set-rate-limit")
def connection_set_rate_limit(
    connection_id: str,
    rate_limit: Annotated[int, typer.Argument(help="Requests per hour.")],
    org: OrgOption,
    as_json: JsonFlag = False,
) -> None:
    """Change a connection's hourly rate limit (up to SIGNOFF_RATE_LIMIT_CEILING)."""

    async def change(ctx: AppContext, connection: Connection) -> None:
        orgs_service.set_rate_limit(connection, rate_limit, ctx.settings, utcnow())

    connection, _ = _change_connection(org, connection_id, change)
    emit(
        as_json,
        connection_to_dict(connection),
        f"connection {connection.id} now allows {rate_limit} requests per hour",
    )


@connection_app.command("transfer")
def connection_transfer(
    connection_id: str,
    org: OrgOption,
    owner: Annotated[str, typer.Option(help="User id or e-mail of an active user.")],
    as_json: JsonFlag = False,
) -> None:
    """Give a connection another owner: its API key acts as them from the next call on
    (say, when its owner has been deactivated). Key, secret and requests stay."""

    async def action(_: AppContext, uow: UnitOfWork) -> tuple[Connection, User]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        connection = await orgs_service.get_connection(uow.orgs, org_row.id, connection_id)
        new_owner = await orgs_service.resolve_user(uow.orgs, org_row.id, owner)
        await orgs_service.transfer_connection(connection, new_owner, utcnow())
        await uow.session.flush()
        return connection, new_owner

    connection, new_owner = run_in_transaction(action)
    emit(
        as_json,
        connection_to_dict(connection),
        f"connection {connection.id} ({connection.name}) now acts as {new_owner.email}",
    )
