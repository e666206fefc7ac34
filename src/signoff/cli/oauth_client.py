"""``signoff oauth-client create|list|delete`` (docs/oauth.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from signoff.cli.common import JsonFlag, emit, emit_list, run_in_transaction
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import NotFound
from signoff.models import Connection
from signoff.oauth import ciba, service
from signoff.oauth.repository import OAuthRepository
from signoff.oauth.schemas import client_to_dict
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.urlpolicy import AddressPolicy

oauth_client_app = typer.Typer(
    help="OAuth clients: integrations that act on behalf of users.", no_args_is_help=True
)


async def _connection(repo: OAuthRepository, reference: str) -> Connection:
    connection_id = parse_id(reference)
    connection = await repo.get_connection(connection_id) if connection_id else None
    if connection is None:
        raise NotFound(f"No connection {reference!r}.")
    return connection


@oauth_client_app.command("create")
def create(
    connection: Annotated[
        str, typer.Option(help="Connection id: the client's calls count against its rate limit.")
    ],
    name: Annotated[str, typer.Option(help="Shown to people on the consent page.")],
    redirect_uri: Annotated[
        list[str] | None,
        typer.Option(
            "--redirect-uri", help="Exact redirect URI; repeat for more (optional with --ciba)."
        ),
    ] = None,
    public: Annotated[
        bool,
        typer.Option("--public", help="No secret (browser, mobile, CLI apps); PKCE required."),
    ] = False,
    ciba_enabled: Annotated[
        bool, typer.Option("--ciba", help="May use OpenID CIBA (docs/ciba.md).")
    ] = False,
    delivery_mode: Annotated[
        str | None,
        typer.Option("--ciba-delivery-mode", help="CIBA: poll (default) or ping."),
    ] = None,
    notification_endpoint: Annotated[
        str | None,
        typer.Option(
            "--ciba-notification-endpoint",
            help="CIBA ping mode: the client's backchannel_client_notification_endpoint.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Register a client; prints client_id and, for confidential clients, the secret once."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> service.IssuedClient:
        registration = await ciba.check_registration(
            AddressPolicy.from_settings(ctx.settings),
            ciba_enabled,
            delivery_mode,
            notification_endpoint,
        )
        row = await _connection(uow.oauth, connection)
        return await service.register_client(
            uow.oauth,
            ctx.settings,
            row,
            name=name,
            redirect_uris=redirect_uri or [],
            public=public,
            now=utcnow(),
            ciba=registration,
        )

    issued = run_in_transaction(action)
    data = {**client_to_dict(issued.client), "client_secret": issued.client_secret}
    human = f"created OAuth client {issued.client.client_id}"
    if issued.client_secret:
        human += f"\nclient secret (shown once): {issued.client_secret}"
    else:
        human += " (public: no secret, PKCE S256 required)"
    emit(as_json, data, human)


@oauth_client_app.command("list")
def list_clients(
    connection: Annotated[str | None, typer.Option(help="Only this connection's clients.")] = None,
    org: Annotated[
        str | None, typer.Option(help="Every client of this organization (id or unique name).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List clients (never their secrets)."""
    if (connection is None) == (org is None):
        raise typer.BadParameter("give exactly one of --connection and --org")

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        if connection is not None:
            row = await _connection(uow.oauth, connection)
            clients = await service.list_clients(uow.oauth, row.org_id, row.id)
        else:
            org_row = await orgs_service.resolve_org(uow.orgs, org or "")
            clients = await service.list_clients(uow.oauth, org_row.id, None)
        return [client_to_dict(c) for c in clients]

    rows = run_in_transaction(action)
    emit_list(
        as_json,
        rows,
        ("client_id", "name", "type", "connection", "redirect URIs"),
        lambda c: (
            c["client_id"],
            c["name"],
            "public" if c["public"] else "confidential",
            c["connection_id"],
            "\n".join(c["redirect_uris"]),
        ),
    )


@oauth_client_app.command("delete")
def delete(
    client_id: Annotated[str, typer.Argument(help="The client's client_id (oc_...).")],
    as_json: JsonFlag = False,
) -> None:
    """Delete a client: every token it holds stops working at once."""

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        client = await uow.oauth.find_client_anywhere(client_id)
        if client is None or client.deleted_at is not None:
            raise NotFound(f"No OAuth client {client_id!r}.")
        await service.delete_client(uow.oauth, client, utcnow())
        return client_to_dict(client)

    data = run_in_transaction(action)
    emit(as_json, data, f"deleted OAuth client {client_id}; its tokens no longer work")
