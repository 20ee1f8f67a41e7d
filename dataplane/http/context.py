"""State shared by every connection of one server: the handler, the limits, the live connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from dataplane.http.limits import ServerLimits
from dataplane.http.request import Handler


class Connection(Protocol):
    """What the server needs from a live connection of either protocol."""

    def check_timeouts(self, now: float) -> None:
        """Close or answer 408 if a deadline (idle, read, linger) has passed."""

    def shutdown(self) -> None:
        """Graceful: accept no new request, close once the in-flight ones are answered."""

    def kill(self) -> None:
        """Close at once, whatever is in flight."""

    def largest_body(self) -> int:
        """Bytes of the largest request body still arriving on this connection (0: none)."""

    def shed_body(self) -> None:
        """Refuse that request (503 ``buffers_full``) and drop its bytes."""


@dataclass(slots=True, eq=False)
class ServerContext:
    handler: Handler
    limits: ServerLimits
    loop: asyncio.AbstractEventLoop
    connections: set[Connection] = field(default_factory=set)
    draining: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    # Told (request target, status) of every answer the server gives on its own (413, 400, 408,
    # 431): such requests never reach the handler, which would otherwise not count them.
    on_refusal: Callable[[bytes, int], None] | None = None
    # Request body bytes held by every connection: bodies still arriving, and the bodies of
    # requests not yet answered (bounded by ``limits.max_buffered_body_bytes``).
    body_held: int = 0

    def make_room(self, need: int, own: int) -> bool:
        """Room for ``need`` more body bytes of a request that has ``own`` already; False when
        that request must be refused.

        As Envoy's overload manager resets the streams holding the most memory, the largest
        bodies still arriving (on any connection) are refused while they are larger than the
        asking one: a client trickling huge bodies loses before one sending a small request.
        Only on overload (a scan of the connections).
        """
        limit = self.limits.max_buffered_body_bytes
        while self.body_held + need > limit:
            victim: Connection | None = None
            largest = own + need
            for conn in self.connections:
                size = conn.largest_body()
                if size > largest:
                    victim, largest = conn, size
            if victim is None:
                return False
            held = self.body_held
            victim.shed_body()
            if self.body_held >= held:  # never loop on a connection that freed nothing
                return False
        return True

    def remove(self, conn: Connection) -> None:
        """A connection is gone; wake ``drain`` when it was the last one."""
        self.connections.discard(conn)
        if not self.connections and self.draining:
            self.drained.set()


def still_draining(transport: asyncio.Transport, last_size: int) -> int:
    """At an idle deadline: the output buffer size if the client is still reading an earlier
    answer (the buffer changed since ``last_size``), else 0 (the connection should close).

    An answer handed to the transport is not yet delivered: a slow reader of a large answer
    is not idle, but one that makes no progress for a whole period is.
    """
    size = transport.get_write_buffer_size()
    return size if size and size != last_size else 0


def close_idle(transport: asyncio.Transport) -> None:
    """Close a timed-out connection; abort it when output is still stuck in its buffer (a client
    that stopped reading would otherwise keep it open as long as it likes)."""
    if transport.get_write_buffer_size():
        transport.abort()
    else:
        transport.close()


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on every accepted socket (SPEC §5): small answers and SSE events never wait."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# A connection's transport methods are bound once the transport is made (compiled, a call by
# name looks the method up each time); these stand in for them until then.
def unmade_write(data: bytes) -> None:
    raise RuntimeError("the connection is not made yet")


def unmade_writelines(pieces: Iterable[bytes | memoryview]) -> None:
    raise RuntimeError("the connection is not made yet")


def unmade_closing() -> bool:
    """Closed, as far as a write can tell."""
    return True
