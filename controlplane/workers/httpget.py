"""A minimal GET client over HTTP/1.1 (RFC 9112) or h2c prior knowledge (RFC 9113 §3.3).

For discovery only (a few requests per registration, not a hot path): one connection per
request, ``Connection: close``, bodies capped. Callers bound each call with
``asyncio.timeout``. ``OSError``, ``httptools`` and ``h2`` exceptions are translated here:
``ProtocolMismatch`` when the peer answered but not in the protocol we spoke (the caller
then tries the other one), ``HttpGetError`` for everything else.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import httptools

MAX_BODY_BYTES = 1024 * 1024
READ_CHUNK = 65536


class HttpGetError(Exception):
    """The GET failed (connect, reset, oversized answer)."""


class ProtocolMismatch(HttpGetError):
    """The peer does not speak the protocol we tried (or closed before any answer)."""


async def get_h1(
    host: str, port: int, authority: str, path: str, authorization: str | None = None
) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET path`` over HTTP/1.1 (with ``Authorization`` when given)."""
    reader, writer = await _connect(host, port)
    try:
        auth = f"Authorization: {authorization}\r\n" if authorization else ""
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n{auth}"
            "User-Agent: fleetplane-control\r\nConnection: close\r\n\r\n".encode("ascii")
        )
        collector = _H1Collector()
        parser = httptools.HttpResponseParser(collector)
        collector.parser = parser
        while not collector.done:
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                if collector.status is not None and not collector.chunked_or_sized:
                    break  # body delimited by close
                raise ProtocolMismatch("connection closed before a complete HTTP/1.1 answer")
            try:
                parser.feed_data(chunk)
            except httptools.HttpParserError as exc:
                raise ProtocolMismatch(f"not an HTTP/1.1 answer ({exc})") from None
            if collector.size > MAX_BODY_BYTES:
                raise HttpGetError(f"answer larger than {MAX_BODY_BYTES} bytes")
        assert collector.status is not None
        return collector.status, b"".join(collector.body)
    except OSError as exc:
        raise HttpGetError(str(exc) or type(exc).__name__) from None
    finally:
        writer.close()


class _H1Collector:
    def __init__(self) -> None:
        self.status: int | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.done = False
        self.chunked_or_sized = False
        self.parser: Any = None

    def on_header(self, name: bytes, value: bytes) -> None:
        lname = name.lower()
        if lname == b"content-length" or (lname == b"transfer-encoding" and b"chunked" in value.lower()):
            self.chunked_or_sized = True

    def on_headers_complete(self) -> None:
        self.status = int(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.size += len(body)

    def on_message_complete(self) -> None:
        self.done = True


async def get_h2c(
    host: str, port: int, authority: str, path: str, authorization: str | None = None
) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET path`` over HTTP/2 with prior knowledge (``Authorization`` when given)."""
    reader, writer = await _connect(host, port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    try:
        conn.initiate_connection()
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(
            stream_id,
            [
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", authority),
                (":path", path),
                ("accept", "application/json"),
                ("user-agent", "fleetplane-control"),
                *([("authorization", authorization)] if authorization else []),
            ],
            end_stream=True,
        )
        writer.write(conn.data_to_send())
        status: int | None = None
        body: list[bytes] = []
        size = 0
        while True:
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                raise ProtocolMismatch("connection closed before a complete h2c answer")
            try:
                events = conn.receive_data(chunk)
            except h2.exceptions.ProtocolError as exc:
                raise ProtocolMismatch(f"not an h2c answer ({exc})") from None
            for event in events:
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    status = _status(event.headers)
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    body.append(event.data)
                    size += len(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                    if size > MAX_BODY_BYTES:
                        raise HttpGetError(f"answer larger than {MAX_BODY_BYTES} bytes")
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    if status is None:
                        raise HttpGetError("h2c stream ended without a status")
                    return status, b"".join(body)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    raise HttpGetError(f"h2c stream reset (error code {event.error_code})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise ProtocolMismatch(f"h2c connection terminated (error code {event.error_code})")
            outgoing = conn.data_to_send()
            if outgoing:
                writer.write(outgoing)
    except OSError as exc:
        raise HttpGetError(str(exc) or type(exc).__name__) from None
    finally:
        writer.close()


def _status(headers: Any) -> int:
    for name, value in headers:
        if name in (":status", b":status"):
            text = value.decode() if isinstance(value, bytes) else value
            if text.isdigit():
                return int(text)
    raise HttpGetError("h2c answer without a valid :status")


async def _connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_connection(host, port)
    except OSError as exc:
        raise HttpGetError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    except UnicodeError as exc:  # a name the resolver's IDNA codec refuses (an empty or long label)
        raise HttpGetError(f"cannot connect to {host}:{port}: bad host name ({exc})") from None
