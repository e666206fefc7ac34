"""The real ``signoff`` command, as an operator runs it, and its server over a socket.

Each backend gets one walk: set up an org with the CLI, serve it on a free loopback port,
talk HTTP to it while the CLI changes things underneath (rate limit, emergency stop,
revocation), then stop the server with SIGTERM. SQLite uses the default database (a file
in the working directory); PostgreSQL a database created for the test and dropped after.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.crypto import generate_secret_key
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database

CLI_TIMEOUT = 60


def _signoff() -> str:
    script = Path(sys.executable).with_name("signoff")
    assert script.exists(), f"the console script is missing: {script} (pip install -e .)"
    return str(script)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Operator:
    """A shell in a working directory with the SIGNOFF_* environment set."""

    cwd: Path
    env: dict[str, str]
    log: list[str] = field(default_factory=list)

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(  # noqa: PLW1510 - the exit code is checked below
            [_signoff(), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        self.log.append(f"$ signoff {' '.join(args)}\n{result.stdout}{result.stderr}")
        assert result.returncode == expect, "\n".join(self.log)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def json(self, *args: str) -> dict[str, Any]:
        output = self.run(*args, "--json").stdout
        assert output.count("\n") == 1, output  # one JSON object, one line
        data: dict[str, Any] = json.loads(output)
        return data


@pytest.fixture(params=["sqlite", "postgres"])
def operator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Operator]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SIGNOFF_") or key.startswith("SIGNOFF_TEST_")
    }
    env["SIGNOFF_SECRET_KEY"] = generate_secret_key()
    env["SIGNOFF_LOG_LEVEL"] = "info"  # the server's shutdown messages are checked
    if request.param == "sqlite":
        # No SIGNOFF_DATABASE_URL: the default is a SQLite file in the working directory.
        yield Operator(tmp_path, env)
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL end-to-end: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_e2e_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    env["SIGNOFF_DATABASE_URL"] = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    try:
        yield Operator(tmp_path, env)
    finally:
        asyncio.run(_drop_pg_database(name))


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    output: Path

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def _serve(operator: Operator) -> Server:
    port = _free_port()
    output = operator.cwd / "serve.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [_signoff(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=operator.cwd,
            env=operator.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", output)
    give_up = time.monotonic() + 30
    while True:
        assert process.poll() is None, f"signoff serve exited early:\n{server.text()}"
        try:
            if httpx.get(f"{server.base_url}/readyz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        assert time.monotonic() < give_up, f"signoff serve never became ready:\n{server.text()}"
        time.sleep(0.1)


def _stop(server: Server) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            return server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
            raise
    return server.process.returncode


def test_operator_walk(operator: Operator) -> None:
    cli = operator
    if "SIGNOFF_DATABASE_URL" in cli.env:
        # PostgreSQL is migrated only on purpose; other commands refuse a schema behind.
        refused = cli.run("org", "create", "Acme Corp", expect=1)
        assert "signoff db upgrade" in refused.stderr
    cli.run("db", "upgrade")

    org = cli.json("org", "create", "Acme Corp")
    assert set(org) >= {"id", "name"} and org["name"] == "Acme Corp"
    uuid.UUID(org["id"])
    admin = cli.json(
        "user", "create", "--org", org["id"], "--email", "Ada@Acme.example", "--name", "Ada",
        "--role", "admin",
    )  # fmt: skip
    assert (admin["email"], admin["role"], admin["org_id"]) == (
        "ada@acme.example",
        "admin",
        org["id"],
    )
    member = cli.json(
        "user", "create", "--org", "Acme Corp", "--email", "bob@acme.example", "--name", "Bob"
    )
    assert member["role"] == "member"
    # A second user with the same e-mail is refused, without a traceback.
    refused = cli.run(
        "user", "create", "--org", org["id"], "--email", "bob@acme.example", "--name", "B2",
        expect=1,
    )  # fmt: skip
    assert "already exists" in refused.stderr
    users = cli.json("user", "list", "--org", org["id"])["data"]
    assert sorted(u["email"] for u in users) == ["ada@acme.example", "bob@acme.example"]

    connection = cli.json(
        "connection", "create", "--org", org["id"], "--owner", "ada@acme.example", "--name", "CI"
    )
    api_key = connection["api_key"]
    assert re.fullmatch(r"gk_[0-9a-f]{64}", api_key)
    secret = connection["webhook_secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert connection["owner_id"] == admin["id"]
    assert connection["rate_limit"] == 100  # the default
    bob_key = cli.json(
        "connection", "create", "--org", org["id"], "--owner", member["id"], "--name", "Bob's",
        "--rate-limit", "50",
    )["api_key"]  # fmt: skip

    listed = cli.run("connection", "list", "--org", org["id"], "--json").stdout
    assert api_key not in listed and secret not in listed
    rows = {c["id"]: c for c in json.loads(listed)["data"]}
    assert rows[connection["id"]]["api_key_prefix"] == api_key[:11]
    assert rows[connection["id"]]["revoked_at"] is None

    limited = cli.json("connection", "set-rate-limit", connection["id"], "7", "--org", org["id"])
    assert limited["rate_limit"] == 7
    rotated = cli.json("connection", "rotate-secret", connection["id"], "--org", org["id"])
    assert rotated["webhook_secret"].startswith("whsec_")
    assert rotated["webhook_secret"] != secret
    assert rotated["previous_secret_expires_at"].endswith("Z")

    server = _serve(cli)
    try:
        _talk_http(cli, server, org["id"], connection["id"], api_key, bob_key)
    finally:
        code = _stop(server)
    # A graceful shutdown on SIGTERM ends with exit code 0 (tests/e2e/test_shutdown.py).
    assert code == 0, server.text()
    output = server.text()
    assert "Application shutdown complete" in output, output
    assert "Traceback" not in output and "[error" not in output, output
    if "SIGNOFF_DATABASE_URL" not in cli.env:
        assert (cli.cwd / "signoff.storage.database").exists()


def _talk_http(
    cli: Operator, server: Server, org_id: str, connection_id: str, api_key: str, bob_key: str
) -> None:
    ada = {"Authorization": f"Bearer {api_key}"}
    bob = {"Authorization": f"Bearer {bob_key}"}
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        me = http.get("/api/v1/me", headers=ada)
        assert me.status_code == 200
        assert me.json()["user"]["email"] == "ada@acme.example"
        assert me.headers["x-ratelimit-limit"] == "7"  # set by the CLI above

        created = http.post(
            "/api/v1/approvals",
            headers=ada,
            json={
                "title": "Deploy over a real socket",
                "description": "e2e",
                "priority": "critical",
                "required_approvals": 2,
            },
        )
        assert created.status_code == 201, created.text
        request_id = created.json()["id"]
        read = http.get(f"/api/v1/approvals/{request_id}", headers=bob)
        assert read.json()["status"] == "pending"
        vote = http.patch(
            f"/api/v1/approvals/{request_id}", headers=bob, json={"decision": "approve"}
        )
        assert (vote.json()["status"], vote.json()["current_approvals"]) == ("pending", 1)
        # A long poll, answered by a decision made on another connection.
        with httpx.Client(base_url=server.base_url, timeout=30) as poller:
            started = time.monotonic()
            decided = http.patch(
                f"/api/v1/approvals/{request_id}",
                headers=ada,
                json={"decision": "approve", "comment": "ship"},
            )
            assert decided.status_code == 200, decided.text
            body = decided.json()
            assert (body["status"], body["decided_by_name"], body["callback_delivered"]) == (
                "approved",
                "Ada",
                False,
            )
            polled = poller.get(f"/api/v1/approvals/{request_id}?wait=20", headers=bob)
            assert polled.json()["status"] == "approved"
            assert time.monotonic() - started < 10
        search = http.get("/api/v1/approvals", params={"search": "socket"}, headers=bob)
        assert [i["id"] for i in search.json()["data"]] == [request_id]

        # The CLI acts on the running server's database.
        cli.run("emergency-stop", "on", "--org", org_id)
        stopped = http.post(
            "/api/v1/approvals",
            headers=bob,
            json={"title": "t", "description": "d", "priority": "low"},
        )
        assert stopped.status_code == 503
        assert stopped.json()["error"]["code"] == "EMERGENCY_STOP"
        assert http.get(f"/api/v1/approvals/{request_id}", headers=bob).status_code == 200
        cli.run("emergency-stop", "off", "--org", org_id)
        resumed = http.post(
            "/api/v1/approvals",
            headers=bob,
            json={"title": "t", "description": "d", "priority": "low"},
        )
        assert resumed.status_code == 201

        revoked = cli.json("connection", "revoke", connection_id, "--org", org_id)
        assert revoked["revoked_at"] is not None
        refused = http.get("/api/v1/me", headers=ada)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "UNAUTHORIZED"
        assert http.get("/api/v1/me", headers=bob).status_code == 200
