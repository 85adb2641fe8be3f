"""Running the app: the socket bound first, timeouts and a connection limit.

    sock = bind("127.0.0.1", 8030)           # OSError at once when the port is taken
    run(app, sock, header_timeout_s=10, idle_timeout_s=5, max_connections=1024)

uvicorn serves the app over HTTP/1.1 (h11) with a protocol that adds two guards it lacks:
  - a header-read timeout: a connection that has not sent a whole request head within
    `header_timeout_s` of opening (or of its previous answer) is closed, so half-sent
    requests cannot hold sockets forever;
  - a connection limit: a connection beyond `max_connections` open ones is closed at once
    (one INFO line), so idle clients cannot exhaust file descriptors.
uvicorn's own `timeout_keep_alive` closes a connection idle after an answer
(`idle_timeout_s`). The app's body timeout and size limit (`vte.cluster.decice.app`) guard the body.

Garbage collection: before serving, the objects of the start-up (JAX, the policy: millions)
are moved out of the collector's reach (`gc.freeze`) and the youngest generation is
collected every GC_THRESHOLD allocations instead of 700, so that a collection never walks
the whole heap while requests wait (64 concurrent requests: 294 -> 422 requests/s
in-process on the 2-core machine).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import sys

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("vte.serve")

HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 1024
GC_THRESHOLD = (50_000, 50, 100)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header-read timeout and a connection limit (set as
    class attributes by `protocol`)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.info("connection from %s refused: %d connections open (--max-connections %d)",
                     self.client[0] if self.client else "?", len(self.connections) - 1,
                     self.max_connections)
            transport.close()
            return
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        armed = self.cycle                   # a new request head replaces the cycle
        self._header_timer = self.loop.call_later(
            self.header_timeout_s, self._header_timed_out, armed)

    def _header_timed_out(self, armed) -> None:
        if self.cycle is armed and not self.transport.is_closing():
            log.info("connection from %s closed: no whole request head within %g s "
                     "(--header-timeout-s)", self.client[0] if self.client else "?",
                     self.header_timeout_s)
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._header_timer.cancel()
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        super().connection_lost(exc)


def protocol(header_timeout_s: float = HEADER_TIMEOUT_S,
             max_connections: int = MAX_CONNECTIONS) -> type[GuardedH11Protocol]:
    """The protocol class with these limits."""
    if not header_timeout_s > 0:
        raise ValueError(f"--header-timeout-s {header_timeout_s} is invalid: allowed a number > 0")
    if not max_connections >= 1:
        raise ValueError(f"--max-connections {max_connections} is invalid: allowed an integer "
                         ">= 1")
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "max_connections": max_connections})


def checked_bind(host: str, port: int, checks=lambda: None):
    """`checks()` (a command's own checks of its flags: ValueError naming the bad one),
    then `bind`: (what the checks returned, the socket); or exit with the one message
    every protocol gives, before any work."""
    try:
        checked = checks()
        return checked, bind(host, port)
    except OSError as err:
        sys.exit(f"error: cannot listen on {host}:{port}: {err.strerror or err}")
    except ValueError as err:
        sys.exit(f"error: {err}")


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on (host, port); OSError now if the address is taken."""
    if not 0 <= port < 65536:
        raise ValueError(f"--port {port} is invalid: allowed 0..65535 (0: any free port)")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family = infos[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(infos[0][4])
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def run(app, sock: socket.socket, header_timeout_s: float = HEADER_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
        log_level: str = "warning") -> None:
    """Serve `app` on the bound socket until interrupted."""
    import uvicorn

    if not idle_timeout_s > 0:
        raise ValueError(f"--idle-timeout-s {idle_timeout_s} is invalid: allowed a number > 0")
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    config = uvicorn.Config(app, http=protocol(header_timeout_s, max_connections),
                            timeout_keep_alive=idle_timeout_s,
                            log_level=log_level, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["bind", "run", "protocol", "GuardedH11Protocol", "HEADER_TIMEOUT_S",
           "IDLE_TIMEOUT_S", "MAX_CONNECTIONS"]
