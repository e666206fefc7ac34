"""The two baselines of ``make bench``: what plain FastAPI costs on signoff's uvicorn settings.

``POST /echo`` validates a five-field Pydantic body (the fields the create scenario sends)
and echoes it: the floor for a write. ``GET /constant`` answers a constant JSON object of
five fields (the summary fields of interface.md 4.2): the floor for a read. Served exactly
as ``signoff serve`` serves (``signoff.serving``): uvicorn, uvloop, httptools, no access
log, one process.
"""

from __future__ import annotations

import argparse
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel

from signoff.serving import listening_socket, run_server


class EchoBody(BaseModel):
    title: str
    description: str
    priority: Literal["low", "medium", "high", "critical"]
    action_type: str | None = None
    source: str | None = None


CONSTANT = {
    "id": "0190f5e2-7c1a-7b3e-9f00-5a4c3b2a1908",
    "title": "Deploy build 1.1 to production",
    "status": "pending",
    "priority": "high",
    "created_at": "2026-01-01T12:00:00.000Z",
}

app = FastAPI()


@app.post("/echo")
async def echo(body: EchoBody) -> EchoBody:
    return body


@app.get("/constant")
async def constant() -> dict[str, str]:
    return CONSTANT


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Served as `signoff serve` serves (src/signoff/serving.py).
    run_server(app, listening_socket(args.host, args.port))


if __name__ == "__main__":
    main()
