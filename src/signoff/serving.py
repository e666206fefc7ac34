"""uvicorn's server, accepting every waiting connection at once.

Why: the libuv inside uvloop accepts one connection per turn of the event loop. A
busy turn runs every request that is ready, so under load a turn is long, and clients
that connect together wait in line: the last of many connections opened at once waits
one turn for each connection before it, while those are already being answered (``make
bench`` opens its connections together, so this showed in the tail of every scenario;
docs/decisions/0006-pendingacceptor.md).
This server listens on its own socket and, each time it is readable, accepts what is
waiting, as asyncio's own loop does. Everything else (protocols, signals, graceful
shutdown) is uvicorn's.

What it earns is measured against uvicorn serving the same socket itself (``make
bench-replacements``; docs/performance.md, *Hand-written replacements*):
``SIGNOFF_STOCK_ACCEPT=1`` in the environment of ``signoff serve`` selects that,
for that measurement only.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)

# At most this many connections are accepted per readiness: a flood of new clients
# takes turns with the requests already in flight instead of holding the loop.
ACCEPT_BATCH = 128
# Out of file descriptors: stop accepting for a moment rather than spin on a socket
# that stays readable (asyncio does the same).
ACCEPT_RETRY_SECONDS = 1.0
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# The measurement switch (see the module's docstring): uvicorn accepts on its own.
STOCK_SWITCH = "SIGNOFF_STOCK_ACCEPT"
# The same, for ``CoalescingTransport``: each of uvicorn's writes goes to the socket at once.
STOCK_WRITES_SWITCH = "SIGNOFF_STOCK_SOCKET_WRITES"


class CoalescingTransport:
    """A connection's transport whose writes made in one turn of the event loop go to the
    socket together, in one system call.

    Why: uvicorn writes a response's status line and headers, then its body, each with a
    ``write`` of its own, and uvloop sends each at once: two system calls (and two TCP
    segments) for every answer, where one would do (docs/decisions/0037). The writes are
    kept in order and sent at the end of the turn (``call_soon``); closing or aborting the
    connection sends (or drops) what is kept first. Everything else is the transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self._transport.is_closing():
            return
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:
        # Reading, flow control, extra info, the protocol: the transport's own.
        return getattr(self._transport, name)


def coalescing_protocol(protocol_class: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """``protocol_class`` whose connection writes through a ``CoalescingTransport``."""

    class Coalescing(protocol_class):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            loop = asyncio.get_running_loop()
            super().connection_made(CoalescingTransport(transport, loop))  # type: ignore[arg-type]

    Coalescing.__name__ = Coalescing.__qualname__ = f"Coalescing{protocol_class.__name__}"
    return Coalescing


class PendingAcceptor:
    """Accepts every connection waiting on ``listener`` and hands it to the loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        listener: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
    ) -> None:
        self.loop = loop
        self.listener = listener
        self.protocol_factory = protocol_factory
        self._closed = False
        self._starting: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        self.listener.setblocking(False)
        self.loop.add_reader(self.listener.fileno(), self.accept_pending)

    def accept_pending(self) -> int:
        """Accept what is waiting (up to ``ACCEPT_BATCH``); how many were accepted."""
        accepted = 0
        while accepted < ACCEPT_BATCH and not self._closed:
            try:
                connection, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:
                continue  # the client gave up before we got to it
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                logger.warning("cannot accept connections (%s); retrying shortly", exc)
                self.loop.remove_reader(self.listener.fileno())
                self.loop.call_later(ACCEPT_RETRY_SECONDS, self._resume)
                break
            accepted += 1
            connection.setblocking(False)
            task = self.loop.create_task(self._serve(connection))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)
        return accepted

    async def _serve(self, connection: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, connection)
        except OSError:
            connection.close()  # reset before its transport was made: nothing to answer

    def _resume(self) -> None:
        if not self._closed:
            self.loop.add_reader(self.listener.fileno(), self.accept_pending)

    # What uvicorn's shutdown calls on each of its servers.

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()

    async def wait_closed(self) -> None:
        if self._starting:
            await asyncio.wait(set(self._starting))


class Server(uvicorn.Server):
    """uvicorn's server on ``listener``, with a ``PendingAcceptor`` in place of the
    loop's own accepting (see the module's docstring).

    ``on_shutdown`` runs as the shutdown begins, before uvicorn waits for the requests in
    flight: long polls are answered then instead of being cut off at the grace deadline.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        listener: socket.socket,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.listener = listener
        self.on_shutdown = on_shutdown

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            # uvicorn raises a caught signal again once it has shut down, so the process
            # ends killed by SIGTERM (-15). SIGTERM is how process managers ask for a
            # clean stop: after the graceful shutdown, the process exits 0 instead.
            # SIGINT is still raised again (KeyboardInterrupt, exit 130), as a shell expects.
            self._captured_signals.remove(sig)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # No sockets for uvicorn to serve itself: the acceptor below serves ours.
        await super().startup(sockets=[])
        if self.should_exit:
            return
        config = self.config
        protocol_class: type[asyncio.Protocol] = config.http_protocol_class
        if os.environ.get(STOCK_WRITES_SWITCH) != "1":
            protocol_class = coalescing_protocol(protocol_class)

        def protocol_factory() -> asyncio.Protocol:
            # As uvicorn's startup makes them (its protocol classes take these keywords).
            return protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        acceptor = PendingAcceptor(asyncio.get_running_loop(), self.listener, protocol_factory)
        acceptor.start()
        self.servers.append(acceptor)  # type: ignore[arg-type]  # closed on shutdown


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (IPv4 or IPv6) and listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(backlog)
    except OSError:
        listener.close()
        raise
    return listener


def keep_startup_objects_out_of_collections() -> None:
    """Move what exists now (modules, classes, functions, the app: hundreds of thousands
    of objects that live as long as the process) out of the cyclic garbage collector's
    sight. Each full collection otherwise walks them all, holding the event loop, and
    every request in flight waits for it: the longest pauses of a server under load
    (docs/decisions/0007-gc-freeze-at-startup.md). Objects made later are
    collected as usual."""
    gc.collect()
    gc.freeze()


def run_server(
    application: Any,
    listener: socket.socket,
    *,
    log_level: str = "info",
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Serve ``application`` on ``listener`` until a signal stops it: what ``signoff
    serve`` runs, and the bench's baselines with it, so that both measure one serving.
    SIGTERM stops it cleanly and the process then exits 0; an app built by
    ``create_app`` answers its long polls as the shutdown begins."""
    config = uvicorn.Config(
        application,
        loop="uvloop",
        http="httptools",
        log_level=log_level,
        log_config=None,  # keep the logging the caller configured
        access_log=False,
        proxy_headers=True,
        timeout_graceful_shutdown=10,
    )
    keep_startup_objects_out_of_collections()
    if os.environ.get(STOCK_SWITCH) == "1":
        uvicorn.Server(config).run(sockets=[listener])
        return
    Server(config, listener, on_shutdown or _long_polls_answered(application)).run()


def _long_polls_answered(application: Any) -> Callable[[], None] | None:
    """The app's hook that wakes its long polls (``Wiring.waiters.close``), if it has one."""
    wiring = getattr(getattr(application, "state", None), "wiring", None)
    waiters = getattr(wiring, "waiters", None)
    close: Callable[[], None] | None = getattr(waiters, "close", None)
    return close
