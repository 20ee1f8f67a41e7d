"""What a handler sees: the ``Request``, the ``Responder`` it answers through, and the runner.

Both protocol implementations (``http1``, ``http2``) produce the same two objects, so a handler
never knows which protocol carried the request except through ``Request.http2``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from mypy_extensions import mypyc_attr

from dataplane.errors import InternalError, RouterError, error_answer
from dataplane.http.wire import field_list

_log = logging.getLogger("dataplane.http")


class ClientDisconnected(Exception):
    """The client went away (connection closed or reset, h2 stream reset) before the answer ended."""


class Request:
    """One request, fully read. Header names are lower-case bytes, values as received.

    ``lines``: from an HTTP/1.1 client, the head's field lines as it sent them (each led by
    CRLF) but Host, Content-Length and a keep-alive or close Connection, when no other field
    needs more than to be forwarded (``wire.plain_lines``); else None. ``headers`` is then read
    from the head's bytes when first asked for (``wire.field_list``). From an h2 client, the
    regular fields in that form (``wire.fields_as_lines``), or None.
    """

    __slots__ = ("_block", "_headers", "body", "http2", "lines", "method", "path")

    def __init__(
        self,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]] | None,
        body: bytes,
        http2: bool,
        block: bytes = b"",
        lines: bytes | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self._headers = headers
        self._block = block  # every field line, each led by CRLF, when ``headers`` is None
        self.lines = lines
        self.body = body
        self.http2 = http2

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = self._headers
        if headers is None:
            headers = self._headers = field_list(self._block)
        return headers

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def __repr__(self) -> str:
        proto = "h2" if self.http2 else "h1"
        return f"<Request {proto} {self.method!r} {self.path!r} body={len(self.body)}B>"


# Compiled (scripts/build_mypyc.sh), a native class refuses Python subclasses unless told:
# tests answer through their own Responder subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class Responder:
    """Answers one request; ``respond`` for a complete answer, ``start``/``write``/``end`` to stream.

    Header names must be lower-case bytes. The server owns framing: ``content-length``,
    ``transfer-encoding`` and other connection-specific headers given by the handler are dropped
    (a ``connection: close`` given on HTTP/1.1 closes the connection after this answer).
    ``respond``, ``start`` and ``end`` never block; ``write`` waits while the client (transport
    buffer or h2 flow-control window) is not reading, and raises ``ClientDisconnected``.
    Calls after the client went away are silently ignored, except ``write``, which raises.
    """

    # Disconnect bookkeeping is shared by both protocols; the rest is per protocol. The public
    # slots are what a handler's access log reads when the answer ends: the request method, the
    # ``x-router-error-code`` of an ``answer_error``, and two the handler sets itself (the client
    # it authenticated, the upstream it chose); None until known.
    __slots__ = ("_disc", "_disc_waiter", "_on_disc", "client_name", "error_code", "method", "upstream")

    def __init__(self) -> None:
        self._disc = False
        self._disc_waiter: asyncio.Future[None] | None = None
        self._on_disc: Callable[[], object] | None = None
        self.method = b""
        self.error_code: str | None = None
        self.client_name: str | None = None
        self.upstream: str | None = None

    def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        raise NotImplementedError

    @property
    def takes_as_is(self) -> bool:
        """Whether ``respond_as_is`` would send an answer now: an HTTP/1.1 answer that needs
        nothing of the server's own (kept alive, not to a HEAD request). Cheap: a proxy asks
        before it prepares such an answer."""
        return False

    def respond_as_is(self, answer: bytes) -> bool:
        """Send ``answer``, a complete HTTP/1.1 answer (status line, head, body framed by its
        Content-Length) that a proxy received from its own upstream and may forward unchanged,
        if ``takes_as_is``. False: nothing was sent, answer with ``respond``."""
        return False

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def answer_error(self, err: RouterError, extra: list[tuple[bytes, bytes]] | None = None) -> int:
        """Answer ``err`` (SPEC §5: its status, ``x-router-error-code``, the envelope; plus
        ``extra`` headers); its status, for the caller's metrics."""
        status, headers, body = error_answer(err, extra)
        self.error_code = err.code
        self.respond(status, headers, body)
        return status

    async def write(self, chunk: bytes) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    # Streaming from callbacks (``router.path.relay.StreamRelay``: no task, no await per chunk),
    # where ``sends_now``: ``send`` writes at once and says whether more may follow at once;
    # after False the caller stops its producer until ``writable()`` returns.
    @property
    def sends_now(self) -> bool:
        """Whether ``send``/``writable`` are implemented (else stream with ``write``)."""
        return False

    def send(self, chunk: bytes) -> bool:
        """Write ``chunk`` now, after ``start``, without waiting; False when the client is not
        taking bytes (transport paused, or an earlier answer still going out): await
        ``writable()`` before sending more. Raises ``ClientDisconnected``."""
        raise NotImplementedError

    def start_sending(self, status: int, headers: list[tuple[bytes, bytes]], first: bytes) -> bool:
        """``start`` and ``send(first)`` (unless empty) at once: one write where the protocol can."""
        self.start(status, headers)
        return self.send(first) if first else True

    def send_last(self, last: bytes) -> None:
        """``send(last)`` (unless empty) and ``end``: one write where the protocol can. Like
        ``end``, silently nothing more once the client went away."""
        if last and not self._disc:
            with contextlib.suppress(ClientDisconnected):
                self.send(last)
        self.end()

    async def writable(self) -> None:
        """Return once the client takes bytes again (after ``send`` returned False); raises
        ``ClientDisconnected`` (gone, or not reading for ``write_timeout_s``: connection killed)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Break the answer: HTTP/1.1 closes the connection, h2 resets the stream."""
        raise NotImplementedError

    @property
    def started(self) -> bool:
        """True once a status line / HEADERS frame has been produced."""
        raise NotImplementedError

    @property
    def finished(self) -> bool:
        """True once the answer is complete (``respond``/``end``) or aborted."""
        raise NotImplementedError

    @property
    def disconnected(self) -> bool:
        """True once the client went away (connection lost, EOF, or h2 RST_STREAM)."""
        return self._disc

    async def wait_disconnected(self) -> None:
        """Return when the client goes away; never returns for a client that stays."""
        if self._disc:
            return
        fut = self._disc_waiter
        if fut is None:
            fut = self._disc_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(fut)

    def on_disconnect(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback()`` once, synchronously, when the client goes away (None clears it).

        Cheaper than a waiting task: nothing is allocated per request. One callback per
        responder (a later call replaces it); called at once if the client is already gone.
        Exceptions from the callback are logged, never raised into the server.
        """
        if self._disc and callback is not None:
            _call(callback)
        else:
            self._on_disc = callback

    def _notify_disconnect(self) -> None:
        """The client is gone: mark, wake ``wait_disconnected``, run the callback."""
        self._disc = True
        fut = self._disc_waiter
        if fut is not None and not fut.done():
            fut.set_result(None)
        callback, self._on_disc = self._on_disc, None
        if callback is not None:
            _call(callback)


def _call(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        _log.exception("disconnect callback failed")


class Deferred(enum.Enum):
    """What a handler returns when its answer will be finished later by callbacks it arranged
    (e.g. the upstream connection's ``data_received``), with no task at all.

    Such a handler owns its answer completely: it must ``respond``/``end``/``abort`` it
    eventually, watch for the client leaving through ``Responder.on_disconnect``, and guard its
    callbacks (``answer_internal_error`` for a bug). ``spawn`` hands the rest of the answer to a
    task with the same safety net as a coroutine handler.
    """

    DEFERRED = "deferred"


DEFERRED: Final = Deferred.DEFERRED

# A handler either answers synchronously and returns None (no task is created: the cheapest
# path, e.g. for refusals and health checks), returns ``DEFERRED`` (it answers later from
# callbacks: no task either), or returns an awaitable (usually: it is an ``async def``) that the
# server runs as a task.
Handler = Callable[[Request, Responder], Awaitable[None] | Deferred | None]


def dispatch(
    loop: asyncio.AbstractEventLoop, handler: Handler, request: Request, responder: Responder
) -> asyncio.Task[None] | None:
    """Call the handler; run what it returns as a task. Handler bugs answer 500 (SPEC §5 ``internal_error``)."""
    try:
        pending = handler(request, responder)
    except Exception:
        _log.exception("http handler failed for %r", request)
        answer_internal_error(responder)
        return None
    if pending is None:
        if not responder.finished:
            _log.error("http handler returned without finishing its answer for %r", request)
            answer_internal_error(responder)
        return None
    if pending is DEFERRED:
        return None
    return loop.create_task(_finish(pending, request, responder))


def spawn(
    loop: asyncio.AbstractEventLoop, pending: Awaitable[None], request: Request, responder: Responder
) -> asyncio.Task[None]:
    """Run the rest of a deferred handler's answer as a task, guarded like a coroutine handler."""
    return loop.create_task(_finish(pending, request, responder))


async def _finish(pending: Awaitable[None], request: Request, responder: Responder) -> None:
    """Await a handler; a failing or forgetful handler never takes the connection down.

    An exception answers 500 with the SPEC §5 envelope if nothing was sent yet, else breaks the
    answer; a cancelled handler's unfinished answer is broken too.
    """
    try:
        await pending
    except asyncio.CancelledError:
        if not responder.finished:
            responder.abort()
        raise
    except Exception:
        _log.exception("http handler failed for %r", request)
        answer_internal_error(responder)
    else:
        if not responder.finished:
            _log.error("http handler returned without finishing its answer for %r", request)
            answer_internal_error(responder)


def answer_internal_error(responder: Responder) -> None:
    """A handler bug: 500 with the SPEC §5 envelope if nothing was sent yet, else abort."""
    if responder.finished:
        return
    if responder.started:
        responder.abort()
    else:
        responder.answer_error(InternalError())
