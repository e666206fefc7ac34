"""``signoff standing list|revoke --org ORG`` (docs/policies.md, *Standing approvals*).

The operator sees every standing approval in force in the org and may revoke any of
them; a revocation is an audit event of the org without an actor, as every CLI change.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer

from signoff.cli.common import JsonFlag, OrgOption, emit, emit_list, fail, run_in_transaction
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from signoff.policies import standing
from signoff.unit_of_work import UnitOfWork

standing_app = typer.Typer(
    help='Standing approvals: "don\'t ask again for..." granted beside an approval.',
    no_args_is_help=True,
)


def constraints_text(arguments: dict[str, Any]) -> str:
    """``env = "staging", replicas <= 5``; ``any`` without constraints."""
    parts = []
    for name, constraint in arguments.items():
        if "eq" in constraint:
            parts.append(f"{name} = {_json(constraint['eq'])}")
        else:
            parts.append(f"{name} <= {_json(constraint['max'])}")
    return ", ".join(parts) or "any"


def _json(value: Any) -> str:
    return json.dumps(value)


def _uses_text(item: dict[str, Any]) -> str:
    return f"{item['uses']}/{item['max_uses'] if item['max_uses'] is not None else '∞'}"


@standing_app.command("list")
def standing_list(org: OrgOption, as_json: JsonFlag = False) -> None:
    """List the standing approvals in force, newest first: who granted each, for which
    connection and action type, its argument constraints, uses and expiry."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        listed = await standing.list_of_org(uow.standing, row.id, utcnow())
        names = await uow.policies.connection_names(row.id)
        for item in listed:
            item["connection_name"] = names.get(uuid.UUID(item["connection_id"]))
        return listed

    listed = run_in_transaction(action)
    emit_list(
        as_json,
        listed,
        ("id", "granted by", "connection", "action type", "arguments", "uses", "expires"),
        lambda s: (
            s["id"],
            s["granted_by"]["name"],
            s["connection_name"] or s["connection_id"],
            s["action_type"],
            constraints_text(s["arguments"]),
            _uses_text(s),
            s["expires_at"] or "never",
        ),
    )


@standing_app.command("revoke")
def standing_revoke(
    standing_id: Annotated[str, typer.Argument(metavar="ID", help="The standing approval's id.")],
    org: OrgOption,
    as_json: JsonFlag = False,
) -> None:
    """Revoke a standing approval: the requests it would have approved go to people.
    Revoking one already revoked changes nothing."""
    try:
        sid = uuid.UUID(standing_id)
    except ValueError:
        raise fail(f"{standing_id!r} is not a standing approval id (a UUID).") from None

    async def action(_: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        return await standing.revoke_by_operator(uow.standing, row.id, sid, utcnow())

    revoked = run_in_transaction(action)
    emit(
        as_json,
        revoked,
        f"revoked standing approval {revoked['id']} ({revoked['action_type']}, "
        f"granted by {revoked['granted_by']['name']}; used {_uses_text(revoked)})",
    )
