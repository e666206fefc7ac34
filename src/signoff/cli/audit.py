"""``signoff audit``: seal, export and verify the hash-chained audit trail (docs/audit.md)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from joserfc.jwk import OKPKey

from signoff.audit import chain
from signoff.audit.sealing import seal_once, seal_org_now
from signoff.audit.service import cloudevent, export_records
from signoff.cli.common import OrgOption, emit, err, fail, run_with_context
from signoff.context import AppContext
from signoff.orgs import service as orgs_service

audit_app = typer.Typer(help="The hash-chained audit trail: export and verify.")


@audit_app.command("seal")
def seal(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Seal every waiting event into its org's chain now and sign each org's head."""

    async def action(ctx: AppContext) -> int:
        return await seal_once(ctx, force_checkpoint=True)

    count = run_with_context(action)
    emit(as_json, {"sealed": count}, f"sealed {count} events")


@audit_app.command("export")
def export(
    org: OrgOption,
    since_seq: Annotated[int, typer.Option("--since-seq", min=1)] = 1,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or cloudevents")] = "jsonl",
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
) -> None:
    """Write the org's events and signed checkpoints, one JSON object a line."""
    if fmt not in ("jsonl", "cloudevents"):
        raise fail("--format is jsonl or cloudevents")
    stream = output.open("w", encoding="utf-8") if output else sys.stdout

    async def action(ctx: AppContext) -> int:
        async with ctx.reading() as uow:
            org_id = (await orgs_service.resolve_org(uow.orgs, org)).id
        await seal_org_now(ctx, org_id, checkpoint=True)
        source = f"{ctx.settings.public_url}/orgs/{org_id}"
        lines = 0
        async for record in export_records(ctx.db.read_session, org_id, since_seq):
            item = cloudevent(record, source) if fmt == "cloudevents" else record
            stream.write(json.dumps(item, separators=(",", ":")) + "\n")
            lines += 1
        return lines

    try:
        lines = run_with_context(action)
    finally:
        if output:
            stream.close()
    err.print(f"exported {lines} records", highlight=False)


def _load_jwks(source: str) -> dict[str, OKPKey]:
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=30) as answer:  # noqa: S310 (the auditor's URL)
            document: Any = json.load(answer)
    else:
        document = json.loads(Path(source).read_text(encoding="utf-8"))
    keys = {}
    for jwk in document.get("keys", []):
        keys[str(jwk.get("kid"))] = OKPKey.import_key(jwk)
    return keys


@audit_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="An export (jsonl or cloudevents).")],
    jwks: Annotated[
        str | None, typer.Option("--jwks", help="URL or file of the server's JWKS.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every hash, the sequence and each checkpoint's signature; exit 1 at the
    first event changed, inserted, removed or reordered."""
    keys = _load_jwks(jwks) if jwks else None
    with file.open(encoding="utf-8") as lines:
        result = chain.verify(chain.parse_lines(lines), keys.get if keys is not None else None)
    summary = {
        "ok": result.ok,
        "events": result.events,
        "checkpoints": result.checkpoints,
        "last_seq": result.last_seq,
        "problem": result.problem,
        "problem_seq": result.problem_seq,
        "signatures_checked": keys is not None,
    }
    if result.ok:
        text = f"chain verified: {result.events} events up to #{result.last_seq}, " + (
            f"{result.checkpoints} checkpoints signed"
            if keys is not None
            else f"{result.checkpoints} checkpoints (signatures not checked: no --jwks)"
        )
        emit(as_json, summary, text)
        return
    emit(as_json, summary, f"chain broken: {result.problem}")
    raise typer.Exit(1)
