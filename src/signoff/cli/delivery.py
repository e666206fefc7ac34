"""``signoff delivery``: the callback delivery log and manual retries."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from signoff.cli.common import (
    JsonFlag,
    OrgOption,
    emit,
    emit_list,
    fail,
    run_in_transaction,
    run_with_wiring,
)
from signoff.common.ids import parse_id
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.schemas import MAX_LOG_LIMIT, attempt_to_dict
from signoff.wiring import Wiring

delivery_app = typer.Typer(
    help="Callback deliveries: logs and manual retries.", no_args_is_help=True
)


@delivery_app.command("list")
def delivery_list(
    org: OrgOption,
    request: Annotated[
        str | None, typer.Option("--request", help="Only this approval request's attempts.")
    ] = None,
    limit: Annotated[int, typer.Option(help="How many attempts, newest first (1 to 100).")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The delivery log: callback attempts, newest first."""
    if not 1 <= limit <= MAX_LOG_LIMIT:
        raise fail(f"--limit must be between 1 and {MAX_LOG_LIMIT}", 2)
    request_id = parse_id(request) if request else None
    if request and request_id is None:
        raise fail(f"--request {request!r} is not a request id", 2)

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        rows = await uow.webhooks.list_attempts(org_row.id, request_id, limit)
        return [attempt_to_dict(row) for row in rows]

    attempts = run_in_transaction(action)
    emit_list(
        as_json,
        attempts,
        ("time", "delivery", "request", "attempt", "status", "ok", "ms", "error"),
        lambda a: (
            a["created_at"],
            a["delivery_id"],
            a["request_id"],
            str(a["attempt"]),
            str(a["status_code"] or "-"),
            "yes" if a["success"] else "no",
            str(a["duration_ms"]),
            a["error"] or "",
        ),
    )


@delivery_app.command("retry")
def delivery_retry(delivery_id: str, org: OrgOption, as_json: JsonFlag = False) -> None:
    """Attempt a delivery that succeeded or failed once more, now."""
    parsed = parse_id(delivery_id)
    if parsed is None:
        raise fail(f"{delivery_id!r} is not a delivery id", 2)
    checked_id = parsed

    async def action(wiring: Wiring) -> dict[str, Any]:
        async with wiring.ctx.reading() as uow:
            org_row = await orgs_service.resolve_org(uow.orgs, org)
        recorded = await wiring.webhooks.retry(org_row.id, checked_id)
        return {**attempt_to_dict(recorded.entry), "delivery_status": recorded.status}

    entry = run_with_wiring(action)
    emit(
        as_json,
        entry,
        f"attempt {entry['attempt']} of delivery {entry['delivery_id']}: "
        + ("delivered" if entry["success"] else f"failed ({entry['error']})")
        + f", status {entry['status_code']}, {entry['duration_ms']} ms",
    )
    if not entry["success"]:
        raise typer.Exit(1)
