"""A real ``signoff serve`` for the client's tests, and the loopback helpers around it.

The server is the one in this repository, started as an operator would: the ``signoff``
command sets up an org, two users and their connections (``--json``), then serves on a
free loopback port; readiness is polled on ``/readyz``. SQLite always (a file in a temp
directory); PostgreSQL too when ``SIGNOFF_TEST_POSTGRES_URL`` is set, in a database
created for the run and dropped after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff_client import SignoffClient

POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
REQUIRE_ALL = os.environ.get("SIGNOFF_TEST_REQUIRE_ALL") == "1"
CLI_TIMEOUT = 60
READY_TIMEOUT = 30


def _script(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    assert path, f"the {name} command is missing (pip install -e . -e ./clients/python[mcp])"
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


# ---- PostgreSQL: a throwaway database per run ----


async def _postgres_admin(statement: str) -> None:
    import asyncpg  # the server's driver, installed with it

    assert POSTGRES_URL
    connection = await asyncpg.connect(POSTGRES_URL)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def _database_url(name: str) -> str:
    assert POSTGRES_URL
    url = httpx.URL(POSTGRES_URL)
    return str(url.copy_with(path=f"/{name}"))


# ---- the operator and the server ----


@dataclass
class Account:
    """A user of the test org, with a connection (API key and webhook secret) of theirs."""

    user_id: str
    email: str
    name: str
    connection_id: str
    api_key: str
    webhook_secret: str


@dataclass
class LiveServer:
    backend: str
    base_url: str
    cwd: Path
    env: dict[str, str]
    org_id: str
    admin: Account
    member: Account
    process: subprocess.Popen[bytes] | None = None
    log: list[str] = field(default_factory=list)

    def cli(self, *args: str) -> dict[str, Any]:
        """Run ``signoff ARGS --json`` against the server's database; its JSON answer."""
        result = subprocess.run(  # noqa: PLW1510 - checked below
            [_script("signoff"), *args, "--json"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        self.log.append(f"$ signoff {' '.join(args)}\n{result.stdout}{result.stderr}")
        assert result.returncode == 0, "\n".join(self.log)
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def client(self, account: Account | None = None, **options: Any) -> SignoffClient:
        return SignoffClient(self.base_url, (account or self.admin).api_key, **options)

    def server_output(self) -> str:
        return (self.cwd / "serve.log").read_text(errors="replace")

    def new_account(self, email: str, name: str, *, role: str = "member") -> Account:
        user = self.cli(
            "user", "create", "--org", self.org_id, "--email", email, "--name", name,
            "--role", role,
        )  # fmt: skip
        connection = self.cli(
            "connection", "create", "--org", self.org_id, "--owner", user["id"],
            "--name", f"{name}'s",
        )  # fmt: skip
        return Account(
            user["id"], email, name, connection["id"], connection["api_key"],
            connection["webhook_secret"],
        )  # fmt: skip


def _environment(cwd: Path) -> dict[str, str]:
    from signoff.crypto import generate_secret_key

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SIGNOFF_") or key.startswith("SIGNOFF_TEST_")
    }
    env.update(
        {
            "SIGNOFF_SECRET_KEY": generate_secret_key(),
            "SIGNOFF_LOG_LEVEL": "warning",
            # The tests make a few hundred calls per connection; the 429 test lowers one.
            "SIGNOFF_RATE_LIMIT_DEFAULT": "10000",
            "SIGNOFF_LONG_POLL_RECHECK_SECONDS": "0.2",
            "SIGNOFF_EXPIRY_SWEEP_INTERVAL_SECONDS": "0.2",
        }
    )
    return env


def _start(server: LiveServer) -> None:
    port = free_port()
    # OAuth's issuer and endpoints are built from the public URL (test_oauth.py uses them).
    server.env["SIGNOFF_PUBLIC_URL"] = f"http://127.0.0.1:{port}"
    with (server.cwd / "serve.log").open("wb") as sink:
        server.process = subprocess.Popen(
            [_script("signoff"), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=server.cwd,
            env=server.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server.base_url = f"http://127.0.0.1:{port}"
    give_up = time.monotonic() + READY_TIMEOUT
    while True:
        assert server.process.poll() is None, f"signoff serve exited:\n{server.server_output()}"
        try:
            if httpx.get(f"{server.base_url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < give_up, f"never ready:\n{server.server_output()}"
        time.sleep(0.1)


def _stop(server: LiveServer) -> None:
    process = server.process
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _set_up(backend: str, cwd: Path, env: dict[str, str]) -> LiveServer:
    server = LiveServer(backend, "", cwd, env, "", _no_account(), _no_account())
    subprocess.run(
        [_script("signoff"), "db", "upgrade"], cwd=cwd, env=env, check=True,
        capture_output=True, timeout=CLI_TIMEOUT,
    )  # fmt: skip
    server.org_id = server.cli("org", "create", f"Client tests {uuid.uuid4().hex[:6]}")["id"]
    server.admin = server.new_account("ada@acme.example", "Ada", role="admin")
    server.member = server.new_account("bob@acme.example", "Bob")
    _start(server)
    return server


def _no_account() -> Account:
    return Account("", "", "", "", "", "")


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    cwd = tmp_path_factory.mktemp(f"signoff-{request.param}")
    env = _environment(cwd)
    if request.param == "sqlite":
        env["SIGNOFF_DATABASE_URL"] = f"sqlite:///{cwd / 'signoff.db'}"
        server = _set_up("sqlite", cwd, env)
        try:
            yield server
        finally:
            _stop(server)
        return
    if not POSTGRES_URL:
        if REQUIRE_ALL:
            pytest.fail("SIGNOFF_TEST_REQUIRE_ALL=1 but SIGNOFF_TEST_POSTGRES_URL is unset")
        pytest.skip("PostgreSQL: set SIGNOFF_TEST_POSTGRES_URL=postgresql://... to run")
    name = f"signoff_client_{uuid.uuid4().hex[:12]}"
    asyncio.run(_postgres_admin(f'CREATE DATABASE "{name}"'))
    env["SIGNOFF_DATABASE_URL"] = _database_url(name)
    try:
        server = _set_up("postgres", cwd, env)
        try:
            yield server
        finally:
            _stop(server)
    finally:
        asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def admin(live: LiveServer) -> Iterator[SignoffClient]:
    with live.client(live.admin) as client:
        yield client


@pytest.fixture
def member(live: LiveServer) -> Iterator[SignoffClient]:
    with live.client(live.member) as client:
        yield client


@pytest.fixture
def tag() -> str:
    """A word no other test uses, for filters (source, action_type, search)."""
    return f"t{uuid.uuid4().hex[:10]}"


# ---- a callback receiver on loopback ----


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """Records every POST it gets; ``next()`` waits for one (no sleeping)."""

    def __init__(self) -> None:
        self.received: queue.Queue[Received] = queue.Queue()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.received.put(Received(self.path, dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/signoff"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def next(self, timeout: float = 15) -> Received:
        return self.received.get(timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


# ---- a loopback proxy that breaks connections on cue ----


class FaultProxy:
    """TCP proxy in front of the live server. Each new connection takes the next action of
    ``script`` (then ``forward``): ``drop`` (read the request, close without answering),
    ``swallow`` (forward the request, close as the answer starts: the server did the work
    but the client never hears of it), ``429`` or ``502`` (answer that, close).

    Clients in these tests keep no idle connections, so each request opens its own.
    """

    def __init__(self, upstream: str) -> None:
        url = httpx.URL(upstream)
        self.upstream = (url.host, url.port or 80)
        self.script: deque[str] = deque()
        self.seen: list[tuple[float, str]] = []
        self.new_connection = threading.Condition()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def client(self, api_key: str, **options: Any) -> SignoffClient:
        http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
        return SignoffClient(self.url, api_key, http_client=http, **options)

    def wait_for_connections(self, count: int, timeout: float = 15) -> None:
        with self.new_connection:
            assert self.new_connection.wait_for(lambda: len(self.seen) >= count, timeout), self.seen

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            action = self.script.popleft() if self.script else "forward"
            with self.new_connection:
                self.seen.append((time.monotonic(), action))
                self.new_connection.notify_all()
            threading.Thread(target=self._handle, args=(conn, action), daemon=True).start()

    def _handle(self, conn: socket.socket, action: str) -> None:
        conn.settimeout(30)
        with conn:
            if action in ("drop", "429", "502"):
                _read_request(conn)
                if action != "drop":
                    conn.sendall(_canned(int(action)))
                return
            upstream = socket.create_connection(self.upstream, timeout=30)
            with upstream:
                pump = threading.Thread(target=_pipe, args=(conn, upstream), daemon=True)
                pump.start()
                while data := _recv(upstream):
                    if action == "swallow":
                        break  # the server has answered: it committed; the client hears nothing
                    conn.sendall(data)
                # shutdown, not just close: it wakes the pump blocked in recv, and sends FIN.
                for sock in (conn, upstream):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _pipe(source: socket.socket, target: socket.socket) -> None:
    while data := _recv(source):
        try:
            target.sendall(data)
        except OSError:
            return


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = _recv(conn)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length and (chunk := _recv(conn)):
        body += chunk


def _canned(status: int) -> bytes:
    code = "RATE_LIMITED" if status == 429 else "BAD_GATEWAY"
    body = json.dumps({"error": {"code": code, "message": "from the proxy", "details": {}}})
    extra = "Retry-After: 1\r\n" if status == 429 else ""
    return (
        f"HTTP/1.1 {status} Proxy\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()


@pytest.fixture
def proxy(live: LiveServer) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(live.base_url)
    yield fault_proxy
    fault_proxy.close()


def in_thread(action: Callable[[], Any]) -> threading.Thread:
    """Run ``action`` beside the test (a human deciding while the client waits)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # surfaced by join_ok
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def join_ok(thread: threading.Thread, timeout: float = 30) -> None:
    thread.join(timeout)
    assert not thread.is_alive(), "the helper thread did not finish"
    errors: list[BaseException] = thread.errors  # type: ignore[attr-defined]
    if errors:
        raise errors[0]
