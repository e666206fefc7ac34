"""``signoff policy show|set|test --org ORG [--file policy.yaml|json]`` (docs/policies.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from signoff.cli.common import err, out, run_in_transaction
from signoff.cli.routing import load_file
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from signoff.policies import dry_run, service
from signoff.unit_of_work import UnitOfWork

policy_app = typer.Typer(
    help="Policies: an organization's rules that decide routine requests.", no_args_is_help=True
)

OrgOption = Annotated[str, typer.Option("--org", help="Organization id or unique name.")]
FileOption = Annotated[
    Path,
    typer.Option("--file", exists=True, dir_okay=False, readable=True, help="JSON or YAML."),
]


@policy_app.command("show")
def show(org: OrgOption) -> None:
    """Print the org's policy document in force, with its version."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        return await service.document_of(uow.policies, row.id)

    out.print_json(json.dumps(run_in_transaction(action)))


@policy_app.command("set")
def set_policy(org: OrgOption, file: FileOption) -> None:
    """Save the file's rules as the org's next version (checked whole; nothing is stored
    unless every rule is right)."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        return await service.save_rules(uow.policies, row.id, load_file(file), None, utcnow())

    document = run_in_transaction(action)
    err.print(
        f"policies of {org}: version {document['version']}, {document['rule_count']} rules",
        highlight=False,
    )


@policy_app.command("test")
def test_policy(
    org: OrgOption,
    file: FileOption,
    days: Annotated[int, typer.Option("--days", min=1, max=365)] = 30,
) -> None:
    """Replay the file's rules over the org's decided requests of the last DAYS days and
    print what they would have done (nothing is stored)."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        data = load_file(file)
        return await dry_run.replay_history(uow.policies, row.id, data, days, utcnow())

    out.print_json(json.dumps(run_in_transaction(action)))
