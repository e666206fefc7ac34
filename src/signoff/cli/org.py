"""``signoff org``: organizations."""

from __future__ import annotations

from typing import Any

import typer

from signoff.cli.common import JsonFlag, emit, emit_list, run_in_transaction
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import Organization
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork

org_app = typer.Typer(help="Organizations.", no_args_is_help=True)


@org_app.command("create")
def org_create(name: str, as_json: JsonFlag = False) -> None:
    """Create an organization."""

    async def action(_: AppContext, uow: UnitOfWork) -> Organization:
        return await orgs_service.create_org(uow.orgs, name, utcnow())

    org = run_in_transaction(action)
    emit(as_json, {"id": str(org.id), "name": org.name}, f"created organization {org.id}")


@org_app.command("list")
def org_list(as_json: JsonFlag = False) -> None:
    """List organizations."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        return [
            {"id": str(o.id), "name": o.name, "emergency_stop": o.emergency_stop}
            for o in await uow.orgs.list_orgs()
        ]

    orgs = run_in_transaction(action)
    emit_list(
        as_json,
        orgs,
        ("id", "name", "emergency stop"),
        lambda org: (org["id"], org["name"], "on" if org["emergency_stop"] else "off"),
    )
