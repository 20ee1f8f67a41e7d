"""Write backpressure shared by the HTTP/1.1 and h2c connections.

asyncio pauses a protocol when the transport's write buffer passes its high-water mark; a
handler that writes while paused waits here until the buffer drains, the connection is lost
(``ClientDisconnected``), or ``write_timeout_s`` passes: then the client stopped reading and
must not hold the connection (and its handler) forever, so the connection is killed.
"""

from __future__ import annotations

import asyncio

from dataplane.http.limits import ServerLimits
from dataplane.http.request import ClientDisconnected


class WriteBackpressure(asyncio.Protocol):
    """Base of both connection protocols: ``pause_writing``/``resume_writing`` and the waiters."""

    loop: asyncio.AbstractEventLoop
    limits: ServerLimits
    lost: bool

    def __init__(self) -> None:
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def kill(self) -> None:
        raise NotImplementedError

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_writers()

    async def wait_writable(self) -> None:
        fut = self.loop.create_future()
        self._drain_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, self.limits.write_timeout_s)
        except TimeoutError:
            self.kill()
            raise ClientDisconnected from None

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                if self.lost:
                    fut.set_exception(ClientDisconnected())
                else:
                    fut.set_result(None)
