"""``signoff serve`` and ``signoff worker``: the long-running processes."""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Annotated

import typer
import uvloop

from signoff import __version__
from signoff.cli.common import err, fail, open_database, redacted_url
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.logs import configure_logging
from signoff.wiring import Wiring


def freeze_startup_objects() -> None:
    """Leave what startup built (modules, the app, its schemas) out of garbage collection.

    Why: a full collection walks every object the process holds, most of them built at
    startup, and under load such collections paused every request in flight: they made
    the slowest answers of every ``make bench`` scenario
    (docs/decisions/0007-gc-freeze-at-startup.md). Those objects live as long as the
    process; what requests allocate is still collected.
    """
    gc.collect()
    gc.freeze()


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

    settings = open_database(apart=True)
    configure_logging(settings)
    try:
        listener = listening_socket(host, port)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    setup_link = first_run_setup_link(settings, host, port)
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


def first_run_setup_link(settings: Settings, host: str, port: int) -> str | None:
    """On an empty database, a one-time setup link (dashboard/service.py); else None."""
    from signoff.dashboard.service import issue_setup_token

    async def issue() -> str | None:
        wiring = Wiring.from_settings(settings)
        try:
            async with wiring.ctx.transaction() as uow:
                return await issue_setup_token(uow.orgs, utcnow())
        finally:
            await wiring.close()

    token = asyncio.run(issue())
    if token is None:
        return None
    explicit = "public_url" in settings.model_fields_set
    base = settings.public_url if explicit else f"http://{host}:{port}"
    return f"{base}/setup/{token}"


def worker() -> None:
    """Run only the background work (deliveries, notifications, expiry sweep), for scale-out."""
    from signoff.retention.service import run_retention
    from signoff.worker.audit_chain import run_audit_sealer
    from signoff.worker.deliveries import run_delivery_worker
    from signoff.worker.notifications import run_notification_sender
    from signoff.worker.sweeper import run_expiry_sweep

    settings = open_database(apart=True)
    configure_logging(settings)

    async def main() -> None:
        wiring = Wiring.from_settings(settings)
        ctx = wiring.ctx
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        freeze_startup_objects()
        err.print(f"signoff {__version__} worker started", highlight=False)
        try:
            await asyncio.gather(
                run_expiry_sweep(ctx, wiring.poisoned, stop),
                run_delivery_worker(ctx, wiring.webhooks, wiring.hub, stop),
                run_notification_sender(wiring.notifications, wiring.hub, stop),
                run_retention(ctx, stop),
                run_audit_sealer(ctx, stop),
            )
        finally:
            await wiring.close()

    # uvloop, as ``serve`` runs the same loops: each callback attempt's socket calls cost
    # less there than on asyncio's own loop (``make bench-expiry``).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
