"""A real HTTP/1.1 callback receiver on a loopback port, for benchmarks and tests.

It lives in bench/ so that ``make bench-callbacks`` needs nothing from tests/; the tests
import it from here.

Small on purpose (raw asyncio streams): it records every request as received, answers
with what the test scripts (a status sequence, a slow or hanging answer, a redirect, a big
body), keeps connections alive like a real server, and counts the connections it accepts
(so a test can prove that nothing was even dialled).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

REASONS = {200: "OK", 204: "No Content", 302: "Found", 500: "Internal Server Error"}


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes
    at: float  # time.monotonic() when the request was complete


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False  # read the request, never answer


Script = Callable[[Received], Reply]


class Receiver:
    """``async with Receiver(...) as r: r.url`` serves until the block ends."""

    def __init__(
        self,
        replies: list[Reply] | None = None,
        default: Reply | None = None,
        script: Script | None = None,
        port: int = 0,
    ) -> None:
        self.replies = list(replies or [])
        self.default = default or Reply()
        self.script = script
        self.requested_port = port
        self.received: list[Received] = []
        self.connections = 0
        self._arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._released = asyncio.Event()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", self.requested_port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def release_hung(self) -> None:
        """Let hanging answers go (with the default reply)."""
        self._released.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """Wait until ``count`` requests have arrived; returns them all."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.received) >= count), timeout
            )
        return list(self.received)

    def _reply_for(self, request: Received) -> Reply:
        if self.script is not None:
            return self.script(request)
        if self.replies:
            return self.replies.pop(0)
        return self.default

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                async with self._arrived:
                    self.received.append(request)
                    self._arrived.notify_all()
                reply = self._reply_for(request)
                if reply.hang:
                    await self._released.wait()
                    return
                if reply.delay:  # a slow receiver, as the test scripts it
                    await asyncio.sleep(reply.delay)
                writer.write(_render(reply))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        except asyncio.CancelledError:
            return  # closing: asyncio's stream callback must not see a cancelled task
        finally:
            self._writers.discard(writer)
            self._handlers.discard(task)
            writer.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> Received | None:
        try:
            first = await reader.readexactly(1)
            if first == b"\x16":
                return None  # a TLS handshake: this is a plain-HTTP server, hang up
            head = first + await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, path, _version = lines[0].split(" ", 2)
        except ValueError:
            return None  # not HTTP (a TLS handshake, say): hang up
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        return Received(method, path, headers, body, time.monotonic())


def _render(reply: Reply) -> bytes:
    reason = REASONS.get(reply.status, "Status")
    lines = [f"HTTP/1.1 {reply.status} {reason}", f"Content-Length: {len(reply.body)}"]
    lines += [f"{k}: {v}" for k, v in reply.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body


def free_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
