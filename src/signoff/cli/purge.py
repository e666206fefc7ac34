"""``signoff purge``: delete old finished requests (docs/operations.md, Retention)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from signoff.cli.common import emit, run_with_context
from signoff.common.time import format_timestamp
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from signoff.retention import service


def _parse_before(value: str) -> datetime:
    """A date (``2026-01-31``, midnight UTC) or a timestamp with or without a zone (UTC)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter("give a date (2026-01-31) or a timestamp") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def purge(
    before: Annotated[
        str,
        typer.Option(help="Requests decided before this date or time (UTC) are deleted."),
    ],
    org: Annotated[
        str | None, typer.Option("--org", help="Only this organization (id or unique name).")
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Requests deleted per transaction.")
    ] = service.DEFAULT_BATCH_SIZE,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Delete finished requests (approved, rejected, cancelled, expired) decided before a
    date, with their votes, steps, comments, events and callback deliveries."""

    cutoff = _parse_before(before)

    async def action(ctx: AppContext) -> service.PurgeReport:
        org_id = None
        if org is not None:
            async with ctx.reading() as uow:
                org_id = (await orgs_service.resolve_org(uow.orgs, org)).id
        return await service.purge(
            ctx.transaction,
            cutoff,
            org_id=org_id,
            batch_size=batch_size,
            dry_run=dry_run,
            sign=service.chain_signer(ctx),
        )

    report = run_with_context(action)
    verb = "would delete" if dry_run else "deleted"
    details = ", ".join(
        f"{n} {kind}" for kind, n in sorted(report.rows.items()) if kind != "requests"
    )
    emit(
        as_json,
        {
            "before": format_timestamp(report.before),
            "dry_run": report.dry_run,
            "requests": report.requests,
            "batches": report.batches,
            "rows": dict(report.rows),
        },
        f"{verb} {report.requests} requests decided before {format_timestamp(report.before)}"
        + (f" ({details})" if details else ""),
    )
