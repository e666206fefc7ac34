"""``signoff db``: the database schema."""

from __future__ import annotations

import typer

from signoff.cli.common import err, redacted_url
from signoff.config import get_settings

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration to SIGNOFF_DATABASE_URL."""
    from signoff.migrations import upgrade_to_head

    settings = get_settings()
    upgrade_to_head(settings.database_url)
    err.print(f"database {redacted_url(settings.database_url)} is up to date", highlight=False)
