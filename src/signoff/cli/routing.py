"""``signoff routing show|set --org ORG [--file rules.yaml|json]`` (docs/notifications.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from signoff.cli.common import err, out, run_in_transaction
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import ValidationFailed
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing import service
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork

routing_app = typer.Typer(
    help="Notification routing: an organization's channels and rules.", no_args_is_help=True
)

OrgOption = Annotated[str, typer.Option("--org", help="Organization id or unique name.")]


def load_file(path: Path) -> Any:
    """A routing file: JSON (``.json``) or YAML (anything else; YAML reads JSON too)."""
    text = path.read_text()
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValidationFailed.for_field("file", f"is not valid JSON or YAML: {exc}") from None


@routing_app.command("show")
def show(
    org: OrgOption,
    as_yaml: Annotated[bool, typer.Option("--yaml", help="Print YAML instead of JSON.")] = False,
) -> None:
    """Print the org's routing document (secrets masked)."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        repo = NotificationRepository(uow.session, uow.dialect)
        document = await service.read_routing(repo, ctx.box, row.id)
        _warn(service.routing_warnings(document, service.RoutingChecks.from_settings(ctx.settings)))
        return document

    document = run_in_transaction(action)
    if as_yaml:
        out.print(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), end="")
    else:
        out.print_json(json.dumps(document))


@routing_app.command("set")
def set_routing(
    org: OrgOption,
    file: Annotated[Path, typer.Option("--file", exists=True, dir_okay=False, readable=True)],
) -> None:
    """Replace the org's routing document with the file's (validated whole)."""

    async def action(ctx: AppContext, uow: UnitOfWork) -> dict[str, Any]:
        row = await orgs_service.resolve_org(uow.orgs, org)
        repo = NotificationRepository(uow.session, uow.dialect)
        data = load_file(file)
        checks = service.RoutingChecks.from_settings(ctx.settings)
        return await service.write_routing(repo, ctx.box, checks, None, row.id, data, utcnow())

    document = run_in_transaction(action)
    err.print(
        f"routing of {org}: {len(document['channels'])} channels, {len(document['rules'])} rules",
        highlight=False,
    )
    _warn(document["warnings"])


def _warn(warnings: list[dict[str, str]]) -> None:
    """On stderr: ``show`` prints a document that ``set`` takes back as it is."""
    for warning in warnings:
        err.print(f"warning: {warning['field']}: {warning['message']}", highlight=False)
