"""A response's writes reach the socket together (signoff/serving.py, CoalescingTransport)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from signoff.serving import (
    CoalescingTransport,
    PendingAcceptor,
    coalescing_protocol,
    listening_socket,
)


class RecordingTransport:
    """What a transport was asked to do, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def write_eof(self) -> None:
        self.calls.append(("write_eof", b""))

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", b""))

    def abort(self) -> None:
        self.closing = True
        self.calls.append(("abort", b""))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 4321)}.get(name, default)


def coalescing(recording: RecordingTransport) -> CoalescingTransport:
    return CoalescingTransport(recording, asyncio.get_running_loop())  # type: ignore[arg-type]


async def next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_writes_of_one_turn_reach_the_transport_as_one_write_in_order() -> None:
    recording = RecordingTransport()
    transport = coalescing(recording)
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"")
    transport.writelines([b"{", b"}"])
    assert recording.calls == []  # nothing sent before the turn ends
    assert transport.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\n{}")
    await next_turn()
    assert recording.calls == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}")]
    transport.write(b"next")
    await next_turn()
    assert recording.calls[-1] == ("write", b"next")


async def test_closing_sends_what_is_kept_first_and_aborting_drops_it() -> None:
    closed, aborted = RecordingTransport(), RecordingTransport()
    transport = coalescing(closed)
    transport.write(b"last words")
    transport.close()
    assert closed.calls == [("write", b"last words"), ("close", b"")]
    transport = coalescing(aborted)
    transport.write(b"never sent")
    transport.abort()
    await next_turn()
    assert aborted.calls == [("abort", b"")]


async def test_nothing_is_written_to_a_transport_closed_meanwhile() -> None:
    recording = RecordingTransport()
    transport = coalescing(recording)
    transport.write(b"late")
    recording.closing = True  # the peer went away before the turn ended
    await next_turn()
    assert recording.calls == []


async def test_everything_else_is_the_transports_own() -> None:
    transport = coalescing(RecordingTransport())
    assert transport.get_extra_info("peername") == ("127.0.0.1", 4321)
    assert transport.is_closing() is False


class WriteCounter:
    """A real transport, with its writes counted: put under the coalescing transport
    (the serving fixture wraps the socket's transport first), it counts socket writes."""

    writes: list[int]

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        WriteCounter.writes.append(len(data))
        self._transport.write(data)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
        return
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[type[asyncio.Protocol]], int]]:
    acceptors: list[PendingAcceptor] = []
    config = uvicorn.Config(app, http="httptools", log_config=None, access_log=False)
    config.load()
    state = ServerState()

    def start(protocol_class: type[asyncio.Protocol]) -> int:
        class Counted(protocol_class):  # type: ignore[valid-type,misc]
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(WriteCounter(transport))

        def factory() -> asyncio.Protocol:
            return Counted(config=config, server_state=state, app_state={})  # type: ignore[call-arg]

        listener = listening_socket("127.0.0.1", 0)
        acceptor = PendingAcceptor(asyncio.get_running_loop(), listener, factory)
        acceptor.start()
        acceptors.append(acceptor)
        return int(listener.getsockname()[1])

    WriteCounter.writes = []
    yield start
    for acceptor in acceptors:
        acceptor.close()
        await acceptor.wait_closed()


async def exchange(port: int, paths: list[str]) -> bytes:
    return await asyncio.wait_for(exchanged(port, paths), timeout=10)


async def exchanged(port: int, paths: list[str]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        answers = b""
        for path in paths:
            writer.write(f"GET {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode())
            await writer.drain()
            if path == "/stream":
                answers += await reader.readuntil(b"0\r\n\r\n")
            else:
                answers += await reader.readuntil(b'{"ok":true}')
        return answers
    finally:
        writer.close()


async def test_each_answer_is_one_socket_write_where_uvicorn_makes_two(serve: Any) -> None:
    stock = serve(HttpToolsProtocol)
    assert (await exchange(stock, ["/", "/"])).count(b"HTTP/1.1 200 OK") == 2
    assert len(WriteCounter.writes) == 4  # head, then body, for each answer
    WriteCounter.writes = []
    port = serve(coalescing_protocol(HttpToolsProtocol))
    answers = await exchange(port, ["/", "/", "/"])
    assert answers.count(b"HTTP/1.1 200 OK") == 3
    assert answers.count(b'{"ok":true}') == 3
    assert len(WriteCounter.writes) == 3


async def test_a_streamed_answer_arrives_whole_and_in_order(serve: Any) -> None:
    port = serve(coalescing_protocol(HttpToolsProtocol))
    answer = await exchange(port, ["/stream", "/"])
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert b"4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n" in body
    assert answer.endswith(b'{"ok":true}')
