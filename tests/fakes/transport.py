"""An asyncio transport that records what is written to it (connection logic without sockets)."""

from __future__ import annotations

import asyncio
from typing import Any

from dataplane.http.context import ServerContext
from dataplane.http.http1 import Http1Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import Handler


class RecordingTransport(asyncio.Transport):
    """Collects what the server writes (``out``; ``writes``: each write apart, how many writes
    an answer took); remembers whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data
        self.writes.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        joined = b"".join(lines)
        self.out += joined
        self.writes.append(joined)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def feed_reads(handler: Handler, chunks: list[bytes], **limits: Any) -> RecordingTransport:
    """A front-door HTTP/1.1 connection serving ``handler`` is given ``chunks``, one read each
    (the loop runs once between reads); the transport it writes to."""
    ctx = ServerContext(handler=handler, limits=ServerLimits(**limits), loop=asyncio.get_running_loop())
    conn = Http1Connection(ctx)
    transport = RecordingTransport()
    conn.connection_made(transport)
    for chunk in chunks:
        conn.data_received(chunk)
        await asyncio.sleep(0)
    return transport
