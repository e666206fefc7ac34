"""The ``signoff`` command (decisions.md section 12).

Every command that touches the database migrates a SQLite database itself, so the embedded
mode needs no setup; PostgreSQL is migrated only by ``signoff db upgrade``, and the other
commands refuse to run against a schema that is behind.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from signoff import __version__
from signoff.approvals import service as approvals_service
from signoff.common.time import format_timestamp, utcnow
from signoff.config import Settings, get_settings
from signoff.context import AppContext
from signoff.crypto import generate_secret_key
from signoff.errors import AppError
from signoff.logs import configure_logging
from signoff.models import Connection, Organization, User
from signoff.oauth.cli import oauth_client_app
from signoff.orgs import service as orgs_service
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.service import Outbox, RecordedAttempt

T = TypeVar("T")

app = typer.Typer(
    help="signoff: ask a human before automations and AI agents act.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
org_app = typer.Typer(help="Organizations.", no_args_is_help=True)
user_app = typer.Typer(help="Users of an organization.", no_args_is_help=True)
connection_app = typer.Typer(
    help="Connections: API keys and webhook secrets.", no_args_is_help=True
)
app.add_typer(db_app, name="db")
app.add_typer(org_app, name="org")
app.add_typer(user_app, name="user")
app.add_typer(connection_app, name="connection")
app.add_typer(oauth_client_app, name="oauth-client")
delivery_app = typer.Typer(
    help="Callback deliveries: logs and manual retries.", no_args_is_help=True
)
app.add_typer(delivery_app, name="delivery")

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


def freeze_startup_objects() -> None:
    """Leave what startup built (modules, the app, its schemas) out of garbage collection.

    Why: a full collection walks every object the process holds, most of them built at
    startup, and under load such collections paused every request in flight: they made
    the slowest answers of every ``make bench`` scenario (docs/engineering-log.md, *The
    third round*). Those objects live as long as the process; what requests allocate is
    still collected.
    """
    gc.collect()
    gc.freeze()


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def run_in_transaction(action: Callable[[AppContext, UnitOfWork], Awaitable[T]]) -> T:
    """Run one use case in one committed transaction, as the CLI's unit of work."""
    settings = get_settings()
    try:
        prepare_database(settings)
    except SchemaBehind as exc:
        raise _fail(str(exc)) from None

    async def main() -> T:
        ctx = AppContext.from_settings(settings)
        try:
            async with ctx.transaction() as uow:
                result = await action(ctx, uow)
            await _deliver_callbacks(ctx, uow)
            return result
        finally:
            await ctx.close()

    try:
        return asyncio.run(main())
    except AppError as exc:
        raise _fail(exc.message) from None


async def _deliver_callbacks(ctx: AppContext, uow: UnitOfWork) -> None:
    """Attempt 1 of the callbacks of transitions just committed, as the API makes it;
    the workers retry what fails (decisions.md section 9)."""
    outcomes = await ctx.webhooks.deliver_outbox(uow.outbox)
    if outcomes:
        sent = sum(1 for o in outcomes if o is not None and o.result.success)
        err.print(
            f"callbacks: {sent} of {len(outcomes)} delivered on the first attempt"
            + ("; the delivery workers retry the rest" if sent < len(outcomes) else ""),
            highlight=False,
        )


class _FirstAttempts:
    """Attempt 1 of the callbacks of transitions committed batch by batch (the emergency
    stop's cancellations): made while the next batches commit, at most one worker's
    concurrency of them from here; the rest go to the delivery workers at once."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.budget = ctx.settings.delivery_concurrency
        self.handed_off = 0
        self.tasks: list[asyncio.Task[list[RecordedAttempt | None]]] = []

    async def committed(self, uow: UnitOfWork, _: object) -> None:
        outbox = uow.outbox
        now, later = outbox.claimed[: self.budget], outbox.claimed[self.budget :]
        if later:
            self.handed_off += len(later)
            await self.ctx.webhooks.hand_off(Outbox(token=outbox.token, claimed=later))
        if now:
            self.budget -= len(now)
            attempt = self.ctx.webhooks.deliver_outbox(Outbox(token=outbox.token, claimed=now))
            self.tasks.append(asyncio.create_task(attempt))
        outbox.claimed.clear()

    async def report(self) -> None:
        outcomes = [o for batch in await asyncio.gather(*self.tasks) for o in batch]
        total = len(outcomes) + self.handed_off
        if not total:
            return
        sent = sum(1 for o in outcomes if o is not None and o.result.success)
        err.print(
            f"callbacks: {sent} of {total} delivered on the first attempt"
            + ("; the delivery workers retry the rest" if sent < total else ""),
            highlight=False,
        )


def run_with_context(action: Callable[[AppContext], Awaitable[T]]) -> T:
    """Run a use case that manages its own transactions (a delivery retry, say)."""
    settings = get_settings()
    try:
        prepare_database(settings)
    except SchemaBehind as exc:
        raise _fail(str(exc)) from None

    async def main() -> T:
        ctx = AppContext.from_settings(settings)
        try:
            return await action(ctx)
        finally:
            await ctx.close()

    try:
        return asyncio.run(main())
    except AppError as exc:
        raise _fail(exc.message) from None


def emit(as_json: bool, data: dict[str, Any], human: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        out.print(human, highlight=False)


def _user_dict(user: User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "org_id": str(user.org_id),
        "email": user.email,
        "name": user.name,
        "role": user.role,
        "has_password": user.password_hash is not None,
        "created_at": format_timestamp(user.created_at),
    }


def _connection_dict(connection: Connection) -> dict[str, Any]:
    return {
        "id": str(connection.id),
        "org_id": str(connection.org_id),
        "owner_id": str(connection.owner_id),
        "name": connection.name,
        "rate_limit": connection.rate_limit_per_hour,
        "api_key_prefix": connection.api_key_prefix,
        "created_at": format_timestamp(connection.created_at),
        "revoked_at": format_timestamp(connection.revoked_at),
    }


# ---- serve, worker, db ----


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="API only: leave background work to workers.")
    ] = False,
) -> None:
    """Serve the API with its background work (expiry sweep)."""
    from signoff.app import create_app
    from signoff.serving import listening_socket, run_server

    settings = get_settings()
    try:
        prepare_database(settings)
    except SchemaBehind as exc:
        raise _fail(str(exc)) from None
    configure_logging(settings)
    try:
        listener = listening_socket(host, port)
    except OSError as exc:
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    setup_link = _first_run_setup_link(settings, host, port)
    application = create_app(settings, background=not no_worker)
    freeze_startup_objects()
    err.print(
        f"signoff {__version__} listening on http://{host}:{port} "
        f"(database: {redacted_url(settings.database_url)}, env: {settings.env})",
        highlight=False,
        soft_wrap=True,
    )
    if setup_link:
        err.print(
            "No organization yet. Open this one-time link to create it and its first admin:\n"
            f"  {setup_link}",
            highlight=False,
            soft_wrap=True,
        )
    run_server(application, listener, log_level=settings.log_level)


def _first_run_setup_link(settings: Settings, host: str, port: int) -> str | None:
    """On an empty database, a one-time setup link (dashboard/service.py); else None."""
    from signoff.dashboard.service import issue_setup_token

    async def issue() -> str | None:
        ctx = AppContext.from_settings(settings)
        try:
            async with ctx.transaction() as uow:
                return await issue_setup_token(uow.orgs, utcnow())
        finally:
            await ctx.close()

    token = asyncio.run(issue())
    if token is None:
        return None
    explicit = "public_url" in settings.model_fields_set
    base = settings.public_url if explicit else f"http://{host}:{port}"
    return f"{base}/setup/{token}"


@app.command()
def worker() -> None:
    """Run only the background work (delivery worker, expiry sweep), for scale-out."""
    from signoff.worker.deliveries import run_delivery_worker
    from signoff.worker.sweeper import run_expiry_sweep

    settings = get_settings()
    try:
        prepare_database(settings)
    except SchemaBehind as exc:
        raise _fail(str(exc)) from None
    configure_logging(settings)

    async def main() -> None:
        ctx = AppContext.from_settings(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        freeze_startup_objects()
        err.print(f"signoff {__version__} worker started", highlight=False)
        try:
            await asyncio.gather(run_expiry_sweep(ctx, stop), run_delivery_worker(ctx, stop))
        finally:
            await ctx.close()

    asyncio.run(main())


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration to SIGNOFF_DATABASE_URL."""
    from signoff.migrations import upgrade_to_head

    settings = get_settings()
    upgrade_to_head(settings.database_url)
    err.print(f"database {redacted_url(settings.database_url)} is up to date", highlight=False)


@app.command("secret-key")
def secret_key() -> None:
    """Print a new random key for SIGNOFF_SECRET_KEY."""
    sys.stdout.write(generate_secret_key() + "\n")


@app.command()
def version() -> None:
    """Print the version."""
    sys.stdout.write(__version__ + "\n")


# ---- org ----


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
    if as_json:
        emit(True, {"data": orgs}, "")
        return
    table = Table("id", "name", "emergency stop")
    for org in orgs:
        table.add_row(org["id"], org["name"], "on" if org["emergency_stop"] else "off")
    out.print(table)


# ---- user ----


@user_app.command("create")
def user_create(
    org: OrgOption,
    email: Annotated[str, typer.Option(help="Unique within the organization.")],
    name: Annotated[str, typer.Option(help="Display name.")],
    role: Annotated[str, typer.Option(help="admin or member.")] = "member",
    password: Annotated[
        str | None, typer.Option(help="Dashboard password (argon2-hashed; 8+ characters).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a user."""
    if role not in ("admin", "member"):
        raise _fail("--role must be admin or member", 2)
    checked_role: Literal["admin", "member"] = "admin" if role == "admin" else "member"

    async def action(_: AppContext, uow: UnitOfWork) -> User:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        return await orgs_service.create_user(
            uow.orgs,
            org_row.id,
            email=email,
            name=name,
            role=checked_role,
            password=password,
            now=utcnow(),
        )

    user = run_in_transaction(action)
    emit(as_json, _user_dict(user), f"created user {user.id} ({user.email}, {user.role})")


@user_app.command("list")
def user_list(org: OrgOption, as_json: JsonFlag = False) -> None:
    """List the users of an organization."""

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        return [_user_dict(u) for u in await orgs_service.list_users(uow.orgs, org_row.id)]

    users = run_in_transaction(action)
    if as_json:
        emit(True, {"data": users}, "")
        return
    table = Table("id", "email", "name", "role")
    for user in users:
        table.add_row(user["id"], user["email"], user["name"], user["role"])
    out.print(table)


# ---- connection ----


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
        **_connection_dict(issued.connection),
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
        return [_connection_dict(c) for c in rows]

    connections = run_in_transaction(action)
    if as_json:
        emit(True, {"data": connections}, "")
        return
    table = Table("id", "name", "key", "rate limit", "revoked")
    for c in connections:
        table.add_row(
            c["id"],
            c["name"],
            c["api_key_prefix"] + "…",
            str(c["rate_limit"]),
            c["revoked_at"] or "",
        )
    out.print(table)


def _with_connection(
    org: str, connection_id: str, change: Callable[[AppContext, Connection], Awaitable[T]]
) -> tuple[Connection, T]:
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

    connection, _ = _with_connection(org, connection_id, change)
    emit(as_json, _connection_dict(connection), f"revoked connection {connection.id}")


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

    connection, secret = _with_connection(org, connection_id, change)
    data = {
        **_connection_dict(connection),
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
        orgs_service.set_rate_limit(connection, rate_limit, ctx.settings)

    connection, _ = _with_connection(org, connection_id, change)
    emit(
        as_json,
        _connection_dict(connection),
        f"connection {connection.id} now allows {rate_limit} requests per hour",
    )


# ---- emergency stop ----


@app.command("emergency-stop")
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
        raise _fail("state must be on or off", 2)
    active = state == "on"

    async def action(ctx: AppContext) -> tuple[Organization, int]:
        # The stop commits first: from then on no request of the org is created or decided.
        async with ctx.transaction() as uow:
            org_row = await orgs_service.resolve_org(uow.orgs, org)
            await uow.orgs.set_emergency_stop(org_row.id, active, None, utcnow())
        if not (active and cancel_pending):
            return org_row, 0
        attempts = _FirstAttempts(ctx)
        # The operator acts for no user: the cancellations carry no decided_by.
        cancelled = await approvals_service.cancel_all_pending(
            ctx.transaction, org_row.id, None, attempts.committed
        )
        await attempts.report()
        return org_row, cancelled

    org_row, cancelled = run_with_context(action)
    emit(
        as_json,
        {"org_id": str(org_row.id), "active": active, "cancelled": cancelled},
        f"emergency stop {state} for {org_row.name}"
        + (f"; cancelled {cancelled} pending requests" if cancelled else ""),
    )


# ---- deliveries ----


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
    from signoff.common.ids import parse_id
    from signoff.webhooks.schemas import MAX_LOG_LIMIT, attempt_to_dict

    if not 1 <= limit <= MAX_LOG_LIMIT:
        raise _fail(f"--limit must be between 1 and {MAX_LOG_LIMIT}", 2)
    request_id = parse_id(request) if request else None
    if request and request_id is None:
        raise _fail(f"--request {request!r} is not a request id", 2)

    async def action(_: AppContext, uow: UnitOfWork) -> list[dict[str, Any]]:
        org_row = await orgs_service.resolve_org(uow.orgs, org)
        rows = await uow.webhooks.list_attempts(org_row.id, request_id, limit)
        return [attempt_to_dict(row) for row in rows]

    attempts = run_in_transaction(action)
    if as_json:
        emit(True, {"data": attempts}, "")
        return
    table = Table("time", "delivery", "request", "attempt", "status", "ok", "ms", "error")
    for a in attempts:
        table.add_row(
            a["created_at"],
            a["delivery_id"],
            a["request_id"],
            str(a["attempt"]),
            str(a["status_code"] or "-"),
            "yes" if a["success"] else "no",
            str(a["duration_ms"]),
            a["error"] or "",
        )
    out.print(table)


@delivery_app.command("retry")
def delivery_retry(delivery_id: str, org: OrgOption, as_json: JsonFlag = False) -> None:
    """Attempt a delivery that succeeded or failed once more, now."""
    from signoff.common.ids import parse_id
    from signoff.errors import NotFound
    from signoff.webhooks.schemas import attempt_to_dict

    parsed = parse_id(delivery_id)
    if parsed is None:
        raise _fail(f"{delivery_id!r} is not a delivery id", 2)

    async def action(ctx: AppContext) -> dict[str, Any]:
        async with ctx.reading() as uow:
            org_row = await orgs_service.resolve_org(uow.orgs, org)
        if parsed is None:  # pragma: no cover - checked above
            raise NotFound()
        recorded = await ctx.webhooks.retry(org_row.id, parsed)
        return {**attempt_to_dict(recorded.entry), "delivery_status": recorded.status}

    entry = run_with_context(action)
    emit(
        as_json,
        entry,
        f"attempt {entry['attempt']} of delivery {entry['delivery_id']}: "
        + ("delivered" if entry["success"] else f"failed ({entry['error']})")
        + f", status {entry['status_code']}, {entry['duration_ms']} ms",
    )
    if not entry["success"]:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
