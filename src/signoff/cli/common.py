"""What every ``signoff`` command shares: opening the database, running a use case, printing.

Every command that touches the database migrates a SQLite database itself, so the embedded
mode needs no setup; PostgreSQL is migrated only by ``signoff db upgrade``, and the other
commands refuse to run against a schema that is behind.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from signoff.config import Settings, get_settings
from signoff.context import AppContext
from signoff.errors import AppError
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.service import RecordedAttempt
from signoff.wiring import Wiring

T = TypeVar("T")

err = Console(stderr=True)
out = Console()

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
OrgOption = Annotated[str, typer.Option("--org", help="Organization id (or unique name).")]


class SchemaBehind(RuntimeError):
    pass


def redacted_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def prepare_database(settings: Settings) -> None:
    """Migrate SQLite in place; require PostgreSQL to be at the head revision already."""
    from signoff.migrations import is_at_head, upgrade_to_head

    if settings.is_sqlite:
        # Read first: an upgrade takes the file's write lock, even with nothing to do.
        if not is_at_head(settings.database_url):
            upgrade_to_head(settings.database_url)
    elif not is_at_head(settings.database_url):
        raise SchemaBehind(
            f"The database {redacted_url(settings.database_url)} is not at the latest "
            "schema. Run `signoff db upgrade` first."
        )


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr; the caller raises the returned exit."""
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def open_database(*, apart: bool = False) -> Settings:
    """The settings of a command about to use the database, its schema made ready.

    ``apart``: check (and on SQLite migrate) in a forked child process. Why: the check
    loads alembic and every migration script, which a long-running process would then
    hold for its whole life though it never uses them again
    (docs/decisions/0043-serve-memory.md).
    """
    settings = get_settings()
    try:
        if apart:
            _prepare_in_child(settings)
        else:
            prepare_database(settings)
    except SchemaBehind as exc:
        raise fail(str(exc)) from None
    return settings


def _prepare_in_child(settings: Settings) -> None:
    """``prepare_database`` in a forked child; its exception, if any, raised here."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as child:
        child.submit(prepare_database, settings).result()


def run_in_transaction(action: Callable[[AppContext, UnitOfWork], Awaitable[T]]) -> T:
    """Run one use case in one committed transaction, as the CLI's unit of work."""

    async def in_transaction(ctx: AppContext) -> T:
        # Attempt 1 of the callbacks of transitions it commits is made at once, as the
        # API makes it; the workers retry what fails (decisions.md section 9).
        async with ctx.transaction() as uow:
            result = await action(ctx, uow)
        report_first_attempts(uow.first_attempts.made, handed_off=uow.first_attempts.handed_off)
        return result

    return run_with_context(in_transaction)


def run_with_context(action: Callable[[AppContext], Awaitable[T]]) -> T:
    """Run a use case that manages its own transactions (an emergency stop, say)."""
    return run_with_wiring(lambda wiring: action(wiring.ctx))


def run_with_wiring(action: Callable[[Wiring], Awaitable[T]]) -> T:
    """Run a use case that needs one of the process's services (a delivery retry's
    dispatcher, say), with them built and closed around it."""
    settings = open_database()

    async def main() -> T:
        wiring = Wiring.from_settings(settings)
        try:
            return await action(wiring)
        finally:
            await wiring.close()

    try:
        return asyncio.run(main())
    except AppError as exc:
        raise fail(exc.message) from None


def report_first_attempts(outcomes: list[RecordedAttempt | None], handed_off: int) -> None:
    """Say on stderr how many callbacks the first attempt delivered, if there were any."""
    total = len(outcomes) + handed_off
    if not total:
        return
    sent = sum(1 for o in outcomes if o is not None and o.result.success)
    err.print(
        f"callbacks: {sent} of {total} delivered on the first attempt"
        + ("; the delivery workers retry the rest" if sent < total else ""),
        highlight=False,
    )


def emit(as_json: bool, data: dict[str, Any], human: str) -> None:
    """One JSON object on stdout with ``--json``, else the human sentence."""
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        out.print(human, highlight=False)


def emit_list(
    as_json: bool,
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    cells: Callable[[dict[str, Any]], Sequence[str]],
) -> None:
    """``{"data": rows}`` with ``--json``, else a table of ``columns``, ``cells`` a row."""
    if as_json:
        emit(True, {"data": rows}, "")
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*cells(row))
    out.print(table)
