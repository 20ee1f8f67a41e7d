"""The server side of one h2c connection (RFC 9113 §3.3 prior knowledge, the ``h2`` library): the
base of the tests' scripted h2c workers that answer by what each request carried.

``tests/fakes/scripted_h2c.py`` answers by path and withholds upload credit on demand; this one
collects each request's body, returns its credit at once, and leaves the answer to a subclass.
"""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events


class H2cWorker(asyncio.Protocol):
    """Collects each stream's request body and hands it, whole, to ``request_ended``; every other
    event goes to ``on_event``. What the subclass queued goes out after each read (``flush``)."""

    def __init__(self) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.transport: asyncio.Transport | None = None
        self._bodies: dict[int, list[bytes]] = {}
        self.heads: dict[int, list[tuple[bytes, bytes]]] = {}  # each stream's request header block

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.h2.initiate_connection()
        self.flush()

    def flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self._bodies[event.stream_id] = []  # type: ignore[index]
                self.heads[event.stream_id] = list(event.headers)  # type: ignore[index,arg-type]
            elif isinstance(event, h2.events.DataReceived):
                sid: int = event.stream_id  # type: ignore[assignment]
                self._bodies[sid].append(event.data)  # type: ignore[arg-type]
                self.h2.acknowledge_received_data(event.flow_controlled_length, sid)  # type: ignore[arg-type]
            elif isinstance(event, h2.events.StreamEnded):
                sid = event.stream_id  # type: ignore[assignment]
                self.request_ended(sid, b"".join(self._bodies.pop(sid)))
            else:
                self.on_event(event)
        self.flush()

    def request_ended(self, stream_id: int, body: bytes) -> None:
        """The request on ``stream_id`` is complete: answer it (``self.h2``; ``flush`` follows)."""
        raise NotImplementedError

    def on_event(self, event: h2.events.Event) -> None:
        """Any other event (resets, window updates, settings): ignored unless overridden."""
