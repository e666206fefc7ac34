"""The ``signoff`` command and callbacks: emergency stop, delivery list and retry."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import httpx
import orjson
from bench.receiver import Receiver

from tests.conftest import SECRET_KEY, Org, create_approval


async def signoff(database_url: str, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """Run the real command; answers (exit code, its --json object or None, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update({"SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_SECRET_KEY": SECRET_KEY})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "signoff.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    data = orjson.loads(out) if out.strip() else None
    return process.returncode, data, err.decode()


async def test_emergency_stop_cancel_pending_from_the_cli_sends_each_callback(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    async with Receiver() as receiver:
        ids = {(await create_approval(client, org.member, callback_url=receiver.url))["id"]}
        ids.add((await create_approval(client, org.member, callback_url=receiver.url))["id"])
        code, data, err = await signoff(
            database_url, "emergency-stop", "on", "--org", org.id, "--cancel-pending", "--json"
        )
        assert code == 0, err
        assert data is not None and data["cancelled"] == 2
        assert "callbacks: 2 of 2 delivered" in err
        requests = await receiver.wait_for(2)
    payloads = [orjson.loads(r.body) for r in requests]
    assert {p["request_id"] for p in payloads} == ids
    # The operator decided, not a user.
    assert all(p["status"] == "cancelled" and p["decided_by"] is None for p in payloads)

    code, data, err = await signoff(database_url, "delivery", "list", "--org", org.id, "--json")
    assert code == 0, err
    assert data is not None
    assert {e["request_id"] for e in data["data"]} == ids
    assert all(e["success"] and e["attempt"] == 1 for e in data["data"])

    delivery_id = data["data"][0]["delivery_id"]
    async with Receiver(port=receiver.port) as again:
        code, retried, err = await signoff(
            database_url, "delivery", "retry", delivery_id, "--org", org.id, "--json"
        )
        assert code == 0, err
        [request] = again.received
    assert retried is not None
    assert (
        retried["attempt"] == 2 and retried["success"] and retried["delivery_status"] == "succeeded"
    )
    assert request.headers["x-service-attempt"] == "2"

    code, _, err = await signoff(
        database_url, "delivery", "retry", org.id, "--org", org.id, "--json"
    )  # an id that names no delivery
    assert code == 1 and "No delivery" in err
