"""The router's structured access log (``--access-log``): one JSON line per answered request.

A line: ``{"time": UNIX_S, "route": ..., "method": ..., "status": ..., "code": ..., "duration_s":
..., "client": ..., "worker": ..., "revision": ...}`` where ``code`` is the ``x-router-error-code``
of an answer the router gave itself (else null), ``duration_s`` runs from the request's arrival to
the end of its answer (streams included), ``client`` is the ``--api-keys`` name (else null),
``worker`` the URL of the worker chosen (null when none was), ``revision`` the applied contract
revision (-1: none received yet).

Cheap by construction: the request path (``RouteStats.observe``, the place every answer is
already counted) appends the line's time and duration and its ``Shape``: the other fields,
pre-encoded once for each distinct set (answers repeat their route, method, status and worker),
so a buffered line holds two floats, not an object of nine fields. A timer of the router encodes
the batch's numbers with one msgspec call, splices them between the shapes' parts, and writes
the batch with one ``write`` every ``FLUSH_INTERVAL_S`` (sooner past ``FLUSH_LINES``). The buffer
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

from dataplane.http import Responder
from dataplane.router.state import RouterState

log = structlog.get_logger(__name__)

# Final: compiled (scripts/build_mypyc.sh), a module constant that is not Final is a dict
# lookup in the module's globals at every use (``time`` too, hence ``_now``).
FLUSH_INTERVAL_S: Final = 0.5
FLUSH_LINES: Final = 4096
MAX_BUFFERED: Final = 65536
_now: Final = time
_ENCODER: Final = msgspec.json.Encoder()
# Distinct lines' repeated parts kept (route, method, status, code, client, worker, revision):
# past this many, the cache starts over (a client cycling methods or keys only costs encoding).
_MAX_SHAPES: Final = 1024
# A line's fields besides its time and duration, in the order of ``Shape``'s arguments.
_Fields = tuple[str, str | None, int, str | None, str | None, str | None, int]


class Shape:
    """The parts of a line that repeat from one answer to the next, pre-encoded: ``head`` is
    everything between the time and the duration (route, method, status, code), ``tail`` the
    rest (client, worker, revision, the closing brace and the newline)."""

    __slots__ = ("client", "code", "head", "method", "revision", "route", "status", "tail")

    def __init__(
        self,
        route: str,
        method: str | None,
        status: int,
        code: str | None,
        client: str | None,
        worker: str | None,
        revision: int,
    ) -> None:
        self.route = route
        self.method = method
        self.status = status
        self.code = code
        self.client = client
        self.revision = revision
        encode = _ENCODER.encode
        # Every value through msgspec (escaped as the encoder escapes it), never pasted raw.
        self.head = b"".join(
            [
                b',"route":',
                encode(route),
                b',"method":',
                encode(method),
                b',"status":',
                encode(status),
                b',"code":',
                encode(code),
                b',"duration_s":',
            ]
        )
        self.tail = b"".join(
            [
                b',"client":',
                encode(client),
                b',"worker":',
                encode(worker),
                b',"revision":',
                encode(revision),
                b"}\n",
            ]
        )

    def same(
        self, route: str, method: str | None, status: int, code: str | None, client: str | None, revision: int
    ) -> bool:
        """Whether a line with these fields (and this shape's worker) is of this shape."""
        return (
            self.status == status
            and self.route == route
            and self.method == method
            and self.code == code
            and self.client == client
            and self.revision == revision
        )


def encode_lines(numbers: list[float], shapes: list[Shape]) -> bytes:
    """The JSON lines of buffered answers: ``numbers`` holds each line's time and duration in
    turn, ``shapes`` the rest of each line.

    The batch's numbers are encoded by one msgspec call (a JSON array of floats: no comma inside
    any of them) and split, then spliced between the shapes' parts."""
    encoded = _ENCODER.encode(numbers)[1:-1].split(b",")
    parts: list[bytes] = []
    at = 0
    for shape in shapes:
        parts.append(b'{"time":')
        parts.append(encoded[at])
        parts.append(shape.head)
        parts.append(encoded[at + 1])
        parts.append(shape.tail)
        at += 2
    return b"".join(parts)


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
        # The buffered lines: each one's time and duration in ``numbers``, the rest in ``shapes``.
        self.numbers: list[float] = []
        self.shapes: list[Shape] = []
        # The last shape of each worker's answers (None: answers no worker gave), checked field
        # by field: consecutive answers through one worker mostly share one (no key hashed).
        self._last: dict[str | None, Shape] = {}
        self._known: dict[_Fields, Shape] = {}
        self.dropped = 0
        self._fd = -1
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def record(self, route: str, status: int, duration_s: float, responder: Responder | None) -> None:
        """Buffer the line of one answer (``responder``: None for the HTTP server's own refusals)."""
        shapes = self.shapes
        if len(shapes) >= self._max:
            self.dropped += 1
            return
        contracts = self._state.contracts
        revision = contracts.revision if contracts is not None else -1
        if responder is None:
            method: str | None = None
            code: str | None = None
            client: str | None = None
            worker: str | None = None
        else:
            method = _method_name(responder.method)
            code = responder.error_code
            client = responder.client_name
            worker = responder.upstream
        shape = self._last.get(worker)
        if shape is None or not shape.same(route, method, status, code, client, revision):
            shape = self._shape((route, method, status, code, client, worker, revision))
        numbers = self.numbers
        numbers.append(_now())
        numbers.append(duration_s)
        shapes.append(shape)
        if len(shapes) == FLUSH_LINES and self._wake is not None:
            self._wake.set()

    def _shape(self, key: _Fields) -> Shape:
        """The shape of a line with these fields, kept (until the cache starts over) as the last
        of its worker's."""
        shape = self._known.get(key)
        if shape is None:
            if len(self._known) >= _MAX_SHAPES:
                self._known.clear()
                self._last.clear()
            shape = self._known[key] = Shape(*key)
        self._last[key[5]] = shape
        return shape

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
        shapes = self.shapes
        if not shapes or self._fd < 0:
            return
        numbers = self.numbers
        self.numbers = []
        self.shapes = []
        data = encode_lines(numbers, shapes)
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            # The sink refuses (disk full, closed pipe): count the batch lost, keep serving.
            self.dropped += len(shapes)
            log.warning("access log write failed", sink=self.sink, error=str(exc), dropped=len(shapes))
