"""The contract test: every ``/api/v1`` operation of a live server keeps its OpenAPI document.

schemathesis reads ``/api/v1/openapi.json`` from signoff served by uvicorn on a loopback
port (SQLite always, PostgreSQL when ``SIGNOFF_TEST_POSTGRES_URL`` is set), generates
valid and invalid calls for each operation from the document, makes them with an admin's
API key, and fails on any 5xx, any status the operation does not document, and any answer
(body, content type, headers) that does not match what is documented.

Random ids only ever name nothing (404), so calls with ids take turns on fresh resources,
shared ones (decided or voted by then: the 409s) and the generated ids; some creates reuse
one idempotency key (the 200 replay). Callbacks and test webhooks go to a receiver on
loopback, never to a generated host. Examples are bounded and derandomized (CI time, and a
failure reproduces), and so are the server's long-poll and callback timeouts.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from signoff.app import create_app
from signoff.config import Settings
from signoff.migrations import upgrade_to_head
from signoff.wiring import Wiring
from tests.conftest import (
    POSTGRES_URL,
    _create_pg_database,
    _drop_pg_database,
    create_org,
    make_settings,
)

# Per operation and generation mode (valid, invalid): about 20 operations in all. A deeper
# search, outside CI: SIGNOFF_CONTRACT_EXAMPLES=500 make test PYTEST_ARGS=tests/contract
MAX_EXAMPLES = int(os.environ.get("SIGNOFF_CONTRACT_EXAMPLES", "40"))
STARTUP_SECONDS = 30.0
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)
IDS_IN_PATHS = ("request_id", "step_id", "delivery_id", "group_id")


class _Accepting(BaseHTTPRequestHandler):
    """A callback receiver: takes every POST with 200."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_: Any) -> None:
        pass


@dataclass
class LiveServer:
    base_url: str
    api_key: str
    user_id: str
    receiver_url: str
    http: httpx.Client = field(init=False)
    reused: dict[str, str] = field(default_factory=dict)
    turns: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=30,
        )

    def create_request(self, **extra: Any) -> dict[str, Any]:
        body = {"title": "Contract", "description": "A request to call operations on.", **extra}
        response = self.http.post("/api/v1/approvals", json={"priority": "low", **body})
        assert response.status_code == 201, response.text
        data: dict[str, Any] = response.json()
        return data

    def request_with_step(self) -> tuple[str, str]:
        request_id = self.create_request()["id"]
        steps = [{"approver_id": self.user_id, "step_order": 1}]
        response = self.http.post(f"/api/v1/approvals/{request_id}/steps", json={"steps": steps})
        assert response.status_code == 201, response.text
        return request_id, response.json()["data"][0]["id"]

    def delivery_id(self) -> str:
        """A delivery that has been made (so it may be retried at any time)."""
        if "delivery" not in self.reused:
            request_id = self.create_request(callback_url=self.receiver_url)["id"]
            decided = self.http.patch(
                f"/api/v1/approvals/{request_id}", json={"decision": "approve"}
            )
            assert decided.json()["callback_delivered"] is True, decided.text
            log = self.http.get("/api/v1/webhooks", params={"request_id": request_id})
            self.reused["delivery"] = log.json()["data"][0]["delivery_id"]
        return self.reused["delivery"]

    def group_id(self) -> str:
        """A fresh group whose one member is the admin (so removing them answers 204)."""
        name = f"Contract {next(self.turns)}"
        body = {"name": name, "member_ids": [self.user_id]}
        response = self.http.post("/api/v1/groups", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def shared_group_id(self) -> str:
        if "group" not in self.reused:
            self.reused["group"] = self.group_id()
        return self.reused["group"]

    def shared_request_id(self) -> str:
        """One request every call may read or change: soon decided or cancelled."""
        if "request" not in self.reused:
            self.reused["request"] = self.create_request(required_approvals=2)["id"]
        return self.reused["request"]

    def shared_step(self) -> tuple[str, str]:
        """One step every call may vote on: after the first vote it is no longer pending."""
        if "step" not in self.reused:
            self.reused["step_request"], self.reused["step"] = self.request_with_step()
        return self.reused["step_request"], self.reused["step"]


def _database(backend: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{directory / 'contract.db'}"
        upgrade_to_head(url)
        yield url
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL tests: set SIGNOFF_TEST_POSTGRES_URL=postgresql://... to run")
    name = f"signoff_contract_{int(time.time() * 1000)}"
    url = asyncio.run(_create_pg_database(name))
    upgrade_to_head(url)
    try:
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


async def _an_org(settings: Settings) -> tuple[str, str]:
    wiring = Wiring.from_settings(settings)
    try:
        org = await create_org(wiring.ctx, "Contract", members=1)
    finally:
        await wiring.close()
    return org.admin.api_key, org.admin.user_id


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    for database_url in _database(request.param, tmp_path_factory.mktemp("contract")):
        settings = make_settings(
            database_url,
            long_poll_max_seconds=1,
            delivery_timeout_seconds=2.0,
            delivery_retry_delays_seconds=[0.2],
        )
        api_key, user_id = asyncio.run(_an_org(settings))
        receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Accepting)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        live = LiveServer(
            f"http://127.0.0.1:{port}",
            api_key,
            user_id,
            f"http://127.0.0.1:{receiver.server_address[1]}/hook",
        )
        try:
            yield live
        finally:
            live.http.close()
            server.should_exit = True
            thread.join(STARTUP_SECONDS)
            receiver.shutdown()
            receiver.server_close()
            listener.close()


@pytest.fixture(scope="module")
def api_schema(live_server: LiveServer) -> Any:
    config = schemathesis.Config.from_dict(
        {
            "base-url": live_server.base_url,
            "headers": {"Authorization": f"Bearer {live_server.api_key}"},
            "request-timeout": 30,
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )
    url = f"{live_server.base_url}/api/v1/openapi.json"
    return schemathesis.openapi.from_url(url, config=config)


def _documented_operations() -> list[tuple[str, str]]:
    """(method, path) of every /api/v1 operation, read from the app's own document."""
    # The database is never opened: building the document needs none.
    unopened = Path(tempfile.gettempdir()) / "signoff-contract-document.db"
    app = create_app(make_settings(f"sqlite+aiosqlite:///{unopened}"), background=False)
    paths: dict[str, dict[str, Any]] = app.openapi()["paths"]
    return [
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/api/v1/")
        for method in operations
    ]


@pytest.mark.parametrize(("method", "path"), _documented_operations(), ids=str)
@pytest.mark.slow
def test_operation_keeps_its_contract(
    method: str, path: str, api_schema: Any, live_server: LiveServer
) -> None:
    operation = api_schema[path][method]
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        # Derandomized: CI runs the same calls each time, so a failure is reproducible.
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def call(case: Any) -> None:
            _aim_at_real_resources(case, live_server)
            try:
                case.call_and_validate()
            finally:
                if path == "/api/v1/emergency-stop" and method == "PUT":
                    # The stop would refuse every later write: lift it for the next calls.
                    live_server.http.put("/api/v1/emergency-stop", json={"active": False})
                if path == "/api/v1/org/settings" and method == "PATCH":
                    # Four-eyes would refuse the later calls' own decisions: allow again.
                    live_server.http.patch(
                        "/api/v1/org/settings",
                        json={"self_approval": "allow", "passkey_for": "off"},
                    )

        try:
            call()
        except Unsatisfiable:
            # Every input of this operation accepts anything (it has none, or free-form
            # strings only): there is no invalid call to make. Valid calls must still run.
            if mode is not GenerationMode.NEGATIVE:
                raise


def _aim_at_real_resources(case: Any, live: LiveServer) -> None:
    """Make generated calls reach real resources (random ids only ever name nothing).

    Calls with ids take turns: a fresh resource, one shared by earlier calls (so decided,
    cancelled or voted: the 409s), and the generated id. Steps name a real approver; URLs
    always point at the loopback receiver.
    """
    body = case.body if isinstance(case.body, dict) else None
    if body is not None:
        for key in ("callback_url", "url"):
            if isinstance(body.get(key), str) and body[key].startswith(("http://", "https://")):
                body[key] = live.receiver_url
        steps = body.get("steps")
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, dict) and isinstance(step.get("approver_id"), str):
                step["approver_id"] = live.user_id
    turn = next(live.turns) % 3
    if body is not None and case.path.startswith("/api/v1/groups") and turn == 0:
        # Members must be users of the org: a real one, so changes succeed too.
        if isinstance(body.get("user_id"), str):
            body["user_id"] = live.user_id
        for key in ("user_ids", "member_ids"):
            if isinstance(body.get(key), list):
                body[key] = [live.user_id]
    if body is not None and case.path == "/api/v1/approvals" and turn == 0:
        body["idempotency_key"] = "contract-replay"  # so creates are also replayed (200)
    params = case.path_parameters or {}
    if turn == 2 or not any(name in params for name in IDS_IN_PATHS):
        return
    if "group_id" in params:
        params["group_id"] = live.group_id() if turn == 0 else live.shared_group_id()
        if "user_id" in params:
            params["user_id"] = live.user_id
    elif "delivery_id" in params:
        params["delivery_id"] = live.delivery_id()
    elif "step_id" in params:
        fresh = live.request_with_step()
        params["request_id"], params["step_id"] = fresh if turn == 0 else live.shared_step()
    elif case.method == "GET":
        params["request_id"] = live.shared_request_id()
    else:
        params["request_id"] = (
            live.create_request()["id"] if turn == 0 else live.shared_request_id()
        )
