"""The server accepts every waiting connection in one go (signoff/serving.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from signoff.serving import ACCEPT_BATCH, PendingAcceptor, listening_socket
from tests.conftest import eventually


class Recorder(asyncio.Protocol):
    made: list[asyncio.Transport]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        Recorder.made.append(transport)


def connect(port: int, count: int) -> list[socket.socket]:
    # The kernel completes each handshake at once: the connections wait to be accepted.
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]


def close_all(clients: list[socket.socket]) -> None:
    for client in clients:
        client.close()


async def made(count: int) -> None:
    """Wait for the loop to have built ``count`` connections' protocols."""
    await eventually(lambda: len(Recorder.made) >= count, f"{count} connections", timeout=5)


@pytest.fixture
async def acceptor() -> AsyncIterator[PendingAcceptor]:
    """An acceptor on a loopback port, not started: the tests call it as readiness would."""
    Recorder.made = []
    listener = listening_socket("127.0.0.1", 0)
    listener.setblocking(False)
    acceptor = PendingAcceptor(asyncio.get_running_loop(), listener, Recorder)
    yield acceptor
    for transport in Recorder.made:
        transport.close()
    acceptor.close()
    await acceptor.wait_closed()


def port_of(acceptor: PendingAcceptor) -> int:
    return int(acceptor.listener.getsockname()[1])


async def test_every_waiting_connection_is_accepted_in_one_readiness(
    acceptor: PendingAcceptor,
) -> None:
    clients = connect(port_of(acceptor), 20)
    assert acceptor.accept_pending() == 20
    await made(20)
    assert len(Recorder.made) == 20
    assert acceptor.accept_pending() == 0  # nothing left waiting
    close_all(clients)


async def test_a_flood_of_connections_is_taken_in_batches(acceptor: PendingAcceptor) -> None:
    clients = connect(port_of(acceptor), ACCEPT_BATCH + 3)
    assert acceptor.accept_pending() == ACCEPT_BATCH
    assert acceptor.accept_pending() == 3
    await made(ACCEPT_BATCH + 3)
    assert len(Recorder.made) == ACCEPT_BATCH + 3
    close_all(clients)


async def test_the_acceptor_serves_through_the_loop_once_started() -> None:
    Recorder.made = []
    listener = listening_socket("127.0.0.1", 0)
    acceptor = PendingAcceptor(asyncio.get_running_loop(), listener, Recorder)
    acceptor.start()
    _, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
    try:
        await made(1)
        assert len(Recorder.made) == 1
    finally:
        writer.close()
        for transport in Recorder.made:
            transport.close()
        acceptor.close()
    with pytest.raises(OSError):
        listener.getsockname()  # closed with the acceptor


def test_a_port_in_use_is_refused() -> None:
    first = listening_socket("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            listening_socket("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
