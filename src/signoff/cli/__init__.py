"""The ``signoff`` command (decisions.md section 12), one module per domain.

This module only assembles the app: each command lives in its domain's module, and what
they share (opening the database, running a use case, printing) is in ``common``.
"""

from __future__ import annotations

import sys

import typer

from signoff import __version__
from signoff.cli.audit import audit_app
from signoff.cli.connection import connection_app
from signoff.cli.db import db_app
from signoff.cli.delivery import delivery_app
from signoff.cli.emergency_stop import emergency_stop
from signoff.cli.group import group_app
from signoff.cli.keys import keys_app
from signoff.cli.oauth_client import oauth_client_app
from signoff.cli.org import org_app
from signoff.cli.policy import policy_app
from signoff.cli.purge import purge
from signoff.cli.routing import routing_app
from signoff.cli.secret_key import secret_key
from signoff.cli.serve import serve, worker
from signoff.cli.standing import standing_app
from signoff.cli.user import user_app

__all__ = ["app", "main"]

app = typer.Typer(
    help="signoff: ask a human before automations and AI agents act.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version() -> None:
    """Print the version."""
    sys.stdout.write(__version__ + "\n")


app.command()(serve)
app.command()(worker)
app.command("secret-key")(secret_key)
app.command()(version)
app.command("emergency-stop")(emergency_stop)
app.add_typer(audit_app, name="audit")
app.add_typer(db_app, name="db")
app.add_typer(org_app, name="org")
app.add_typer(user_app, name="user")
app.add_typer(connection_app, name="connection")
app.add_typer(oauth_client_app, name="oauth-client")
app.add_typer(delivery_app, name="delivery")
app.add_typer(routing_app, name="routing")
app.add_typer(policy_app, name="policy")
app.add_typer(group_app, name="group")
app.add_typer(standing_app, name="standing")
app.add_typer(keys_app, name="keys")
app.command()(purge)


def main() -> None:
    app()
