"""The router's structured access log (``--access-log``): one JSON line per answered request.

A line: ``{"time": UNIX_S, "route": ..., "method": ..., "status": ..., "code": ..., "duration_s":
..., "client": ..., "worker": ..., "revision": ...}`` where ``code`` is the ``x-router-error-code``
of an answer the router gave itself (else null), ``duration_s`` runs from the request's arrival to
the end of its answer (streams included), ``client`` is the ``--api-keys`` name (else null),
``worker`` the URL of the worker chosen (null when none was), ``revision`` the applied contract
revision (-1: none received yet).

Cheap by construction: the request path appends one tuple to a list (``RouteStats.observe``, the
place every answer is already counted); a timer of the router encodes the batch with msgspec and
writes it with one ``write`` every ``FLUSH_INTERVAL_S`` (sooner past ``FLUSH_LINES``). The buffer
is capped (``MAX_BUFFERED``): lines past the cap, and batches a failing sink refuses, are dropped
and counted (``fleetplane_access_log_dropped_total``) instead of slowing the answers down.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from time import time
from typing import Final

import msgspec
import structlog
from mypy_extensions import mypyc_attr

from dataplane.http import Responder
from dataplane.router.state import RouterState

log = structlog.get_logger(__name__)

# Final: compiled (scripts/build_mypyc.sh), a module constant that is not Final is a dict
# lookup in the module's globals at every use (``time`` too, hence ``_now``).
FLUSH_INTERVAL_S: Final = 0.5
FLUSH_LINES: Final = 4096
MAX_BUFFERED: Final = 65536
_now: Final = time


# Compiled (scripts/build_mypyc.sh), the Struct stays a Python class: msgspec builds and
# encodes it, a native class could not be one.
@mypyc_attr(native_class=False)
class AccessLine(msgspec.Struct):
    """One line of the access log, in the order it is written (buffered as is: one object per
    request, encoded at flush)."""

    time: float
    route: str
    method: str | None
    status: int
    code: str | None
    duration_s: float
    client: str | None
    worker: str | None
    revision: int


_ENCODER = msgspec.json.Encoder()


def encode_lines(entries: list[AccessLine]) -> bytes:
    """The JSON lines (newline-terminated) of buffered entries, in one buffer."""
    return _ENCODER.encode_lines(entries)


def _method_name(method: bytes) -> str | None:
    """The line's ``method``: the request's, None when the server answered before reading it.

    POST and GET compared first: a request's method is a new bytes object per request, and
    decoding it makes a new str (~220 instructions compiled, a compare ~40)."""
    if method == b"POST":
        return "POST"
    if method == b"GET":
        return "GET"
    return method.decode("latin-1") if method else None


class AccessLog:
    """The buffer the request path appends to, and its periodic flush to the sink."""

    def __init__(self, sink: str, state: RouterState, max_buffered: int = MAX_BUFFERED) -> None:
        """``sink``: ``stderr`` or a file path (appended to); at most ``max_buffered`` lines wait."""
        self.sink = sink
        self._max = max_buffered
        self._state = state
        self.entries: list[AccessLine] = []
        self.dropped = 0
        self._fd = -1
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def record(self, route: str, status: int, duration_s: float, responder: Responder | None) -> None:
        """Buffer the line of one answer (``responder``: None for the HTTP server's own refusals)."""
        entries = self.entries
        if len(entries) >= self._max:
            self.dropped += 1
            return
        contracts = self._state.contracts
        revision = contracts.revision if contracts is not None else -1
        if responder is None:
            entries.append(AccessLine(_now(), route, None, status, None, duration_s, None, None, revision))
        else:
            entries.append(
                AccessLine(
                    _now(),
                    route,
                    _method_name(responder.method),
                    status,
                    responder.error_code,
                    duration_s,
                    responder.client_name,
                    responder.upstream,
                    revision,
                )
            )
        if len(entries) == FLUSH_LINES and self._wake is not None:
            self._wake.set()

    def start(self) -> None:
        """Open the sink (``OSError`` if it cannot be) and start the flush timer."""
        if self.sink == "stderr":
            self._fd = sys.stderr.fileno()
        else:
            # O_APPEND: the children of --processes N share one file; each batch is one write.
            self._fd = os.open(self.sink, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Write what is buffered and close the sink."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.flush()
        if self._fd >= 0 and self.sink != "stderr":
            os.close(self._fd)
        self._fd = -1

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), FLUSH_INTERVAL_S)
            wake.clear()
            self.flush()

    def flush(self) -> None:
        entries = self.entries
        if not entries or self._fd < 0:
            return
        self.entries = []
        data = encode_lines(entries)
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            # The sink refuses (disk full, closed pipe): count the batch lost, keep serving.
            self.dropped += len(entries)
            log.warning("access log write failed", sink=self.sink, error=str(exc), dropped=len(entries))
