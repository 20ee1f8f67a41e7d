"""The data plane's error root and its one error -> answer mapping (SPEC §5).

Every error the router (and the HTTP server under it, ``dataplane.http``) answers with is a
``RouterError``; its class fixes the HTTP status and the code, the instance carries the message
(and ``param`` for contract violations). ``error_answer`` is the only place an error becomes an
answer: status, the headers (content type and ``x-router-error-code``) and the envelope
``{"error":{"type","code","message"[,"param"]}}``. Server errors (5xx) carry generic messages
only: they never reveal worker addresses.
"""

from __future__ import annotations

from typing import Final

import msgspec


class StartupError(Exception):
    """A process of the data plane cannot start (router, engine-sim): the message is the one line
    to print, naming the flag, the value and what is allowed (SPEC §1); the entry point prints it
    and exits non-zero."""


class SettingsError(StartupError, ValueError):
    """A flag value refused while the flags are read, before anything starts."""


class RouterError(Exception):
    """Root of every error the router answers with."""

    status: int = 500
    code: str = "internal_error"
    default_message: str = "internal error"

    def __init__(self, message: str | None = None, *, param: str | None = None) -> None:
        self.message = message if message is not None else self.default_message
        self.param = param
        super().__init__(self.message)

    @property
    def error_type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"


class BadRequest(RouterError):
    status, code, default_message = 400, "bad_request", "bad request"


class SamplingContractViolation(RouterError):
    status, code = 400, "sampling_contract_violation"
    # Every violated field in SPEC §2 order (each is counted, §3.3); ``param`` is the first.
    violated: tuple[str, ...] = ()


class PayloadTooLarge(RouterError):
    status, code, default_message = 413, "payload_too_large", "request body is too large"


class ModelNotFound(RouterError):
    status, code, default_message = 404, "model_not_found", "no worker serves this model"


class RouteNotFound(RouterError):
    """A path outside the route table (SPEC §5.1: default-deny)."""

    status, code, default_message = (
        404,
        "route_not_found",
        "no such route on this router (GET /contract lists the routes it serves)",
    )


class MethodNotAllowed(RouterError):
    """Not in SPEC §5's table: a known path asked with the wrong method."""

    status, code, default_message = 405, "method_not_allowed", "method not allowed on this endpoint"


class ServiceOverloaded(RouterError):
    status, code, default_message = 429, "service_overloaded", "admission queue is full, retry later"


class BuffersFull(RouterError):
    """The server holds its cap of request body bytes (``--max-buffered-body-bytes``): an overload
    answer like Envoy's overload manager gives (503), retry later; the connection closes."""

    status, code, default_message = (
        503,
        "buffers_full",
        "the router holds too many request body bytes, retry later",
    )


class QueueTimeout(RouterError):
    status, code, default_message = 503, "queue_timeout", "timed out waiting for an admission slot"


class NoHealthyWorkers(RouterError):
    status, code, default_message = 503, "no_healthy_workers", "no healthy worker can take this request"


class ContractUnavailable(RouterError):
    status, code, default_message = (
        503,
        "contract_unavailable",
        "no sampling contract snapshot received from the control plane yet",
    )


class UpstreamUnreachable(RouterError):
    status, code, default_message = 502, "upstream_unreachable", "could not reach any worker"


class UpstreamBodyIncomplete(RouterError):
    status, code, default_message = (
        502,
        "upstream_body_incomplete",
        "the worker closed the connection before the answer was complete",
    )


class UpstreamTimeout(RouterError):
    status, code, default_message = 504, "upstream_timeout", "the worker did not answer in time"


class InternalError(RouterError):
    status, code, default_message = 500, "internal_error", "internal error"


class HeaderFieldsTooLarge(BadRequest):
    """The HTTP server's: request headers over ``max_header_bytes`` (RFC 6585 §5)."""

    status, default_message = 431, "request header fields are too large"


class RequestTimeout(BadRequest):
    """The request did not arrive completely within ``read_timeout_s`` (RFC 9110 §15.5.9)."""

    status, default_message = 408, "the request was not received in time"


class VersionNotSupported(BadRequest):
    """An HTTP/1.x-framed request line with another version (RFC 9110 §15.6.6)."""

    status, default_message = 505, "HTTP version not supported (HTTP/2 needs the connection preface)"


class BodyBufferFull(BuffersFull):
    """The server holds ``max_buffered_body_bytes`` of request bodies (503 ``buffers_full``)."""


class ConnectionBodyFull(BuffersFull):
    """Bodies still arriving on one connection passed ``max_connection_body_bytes``."""

    default_message = "too many request body bytes in transit on this connection, send fewer at once"


class _ErrorBody(msgspec.Struct, omit_defaults=True, kw_only=True):
    type: str
    code: str
    param: str | None = None
    message: str


class _Envelope(msgspec.Struct):
    error: _ErrorBody


_encoder = msgspec.json.Encoder()
_JSON: Final = (b"content-type", b"application/json")

Headers = list[tuple[bytes, bytes]]
ErrorAnswer = tuple[int, Headers, bytes]


# Envelopes already written, by what they say: a client repeating one mistake (a flood of
# contract violations, the same unknown model) gets the bytes made the first time (~3k
# instructions saved per answer). Cleared when full, so messages quoting a client bound it.
_BODIES: Final[dict[tuple[type[RouterError], int, str, str, str | None], bytes]] = {}
_MAX_BODIES: Final = 1024


def error_body(err: RouterError) -> bytes:
    """The JSON envelope ``{"error":{"type","code","message"[,"param"]}}`` of SPEC §5."""
    key = (type(err), err.status, err.code, err.message, err.param)
    body = _BODIES.get(key)
    if body is None:
        if len(_BODIES) >= _MAX_BODIES:
            _BODIES.clear()
        body = _BODIES[key] = _encoder.encode(
            _Envelope(_ErrorBody(type=err.error_type, code=err.code, param=err.param, message=err.message))
        )
    return body


def error_answer(err: RouterError, extra: Headers | None = None) -> ErrorAnswer:
    """The answer to ``err``: its status, headers (plus ``extra``, e.g. ``x-contract-revision``
    or ``allow``) and envelope. A fresh header list each time: responders may extend it."""
    headers = [_JSON, (b"x-router-error-code", err.code.encode("ascii"))]
    if extra:
        headers += extra
    return err.status, headers, error_body(err)


def sse_error_event(err: RouterError) -> bytes:
    """The final SSE event sent when a stream fails after its headers went out (SPEC §5)."""
    return b"event: error\ndata: " + error_body(err) + b"\n\n"
