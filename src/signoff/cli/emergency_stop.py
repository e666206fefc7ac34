"""``signoff emergency-stop``: stop (or resume) every write of an organization."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from signoff.approvals import service as approvals_service
from signoff.cli.common import (
    JsonFlag,
    OrgOption,
    emit,
    fail,
    report_first_attempts,
    run_with_context,
)
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import Organization
from signoff.orgs import service as orgs_service
from signoff.webhooks.service import FirstAttemptsInBackground


def emergency_stop(
    state: Annotated[str, typer.Argument(help="on or off")],
    org: OrgOption,
    cancel_pending: Annotated[
        bool, typer.Option("--cancel-pending", help="With on: also cancel every pending request.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Stop (or resume) every write of an organization."""
    if state not in ("on", "off"):
        raise fail("state must be on or off", 2)
    active = state == "on"

    async def action(ctx: AppContext) -> tuple[Organization, int]:
        # The stop commits first: from then on no request of the org is created or decided.
        async with ctx.transaction() as uow:
            org_row = await orgs_service.resolve_org(uow.orgs, org)
            await uow.orgs.set_emergency_stop(org_row.id, active, None, utcnow())
        if not (active and cancel_pending):
            return org_row, 0
        # Attempt 1 of the cancellations' callbacks is made from here while the next
        # batches commit, at most one worker's concurrency of them; the rest go to the
        # delivery workers at once.
        attempts = FirstAttemptsInBackground(ctx.settings.delivery_concurrency)
        # The operator acts for no user: the cancellations carry no decided_by.
        cancelled = await approvals_service.cancel_all_pending(
            functools.partial(ctx.transaction, attempts), org_row.id, None
        )
        report_first_attempts(await attempts.outcomes(), handed_off=attempts.handed_off)
        return org_row, cancelled

    org_row, cancelled = run_with_context(action)
    emit(
        as_json,
        {"org_id": str(org_row.id), "active": active, "cancelled": cancelled},
        f"emergency stop {state} for {org_row.name}"
        + (f"; cancelled {cancelled} pending requests" if cancelled else ""),
    )
