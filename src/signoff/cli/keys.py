"""``signoff keys rotate``: a new key signs receipts from now on (docs/receipts.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from signoff.cli.common import emit, run_with_context
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.receipts import keys

keys_app = typer.Typer(help="The keys approval receipts are signed with.", no_args_is_help=True)


@keys_app.command("rotate")
def rotate(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Add a new signing key and retire the current one. The old public key stays in
    /.well-known/jwks.json until the last receipt it signed has expired; running servers
    sign with the new key within SIGNOFF_SIGNING_KEY_REFRESH_SECONDS."""

    async def action(ctx: AppContext) -> str:
        return await keys.rotate(ctx.db, ctx.box, utcnow())

    kid = run_with_context(action)
    emit(as_json, {"kid": kid}, f"New signing key {kid}; the previous one is retired.")
