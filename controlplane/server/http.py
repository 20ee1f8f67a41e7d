"""``--http-listen``: ``/metrics`` (Prometheus text), ``/healthz``, the status page and its JSON
twin ``/status.json`` (SPEC §8).

A deliberately small HTTP/1.1 server on asyncio streams: GET/HEAD only, one request per
connection, bounded header size and read time. Enough for Prometheus and a browser; the
control plane's real API is gRPC.

With ``--auth-tokens`` every path but ``/healthz`` needs a token of the file, any role (SPEC §6):
``Authorization: Bearer T`` (Prometheus' ``authorization`` setting), or Basic with T as the
password, so that a browser asks for it (401 with ``WWW-Authenticate: Basic``, RFC 7617).
``/healthz`` stays open for load balancers and supervisors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from controlplane.server.auth import TokenTable, http_token
from controlplane.server.component import StatusSection
from controlplane.server.status_page import render_page, status_document

log = structlog.get_logger("controlplane.http")

TITLE = "fleetplane control plane"
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT_S = 5.0
_REASONS = {
    200: "OK",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    400: "Bad Request",
    503: "Service Unavailable",
}


class StatusHttpServer:
    def __init__(
        self,
        sections: Sequence[StatusSection],
        unhealthy: Callable[[], str],
        tokens: TokenTable | None = None,
    ) -> None:
        """``unhealthy()`` is why ``/healthz`` fails (one line), or empty while healthy;
        ``tokens`` None: every path is open (the listener is on loopback, settings.py)."""
        self._sections = sections
        self._unhealthy = unhealthy
        self._tokens = tokens
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; returns the bound (host, port)."""
        self._server = await asyncio.start_server(self._handle, host, port, limit=MAX_HEADER_BYTES)
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _authorized(self, head: bytes) -> bool:
        if self._tokens is None:
            return True
        authorization = None
        for line in head.split(b"\r\n")[1:]:
            name, colon, value = line.partition(b":")
            if colon and name.strip().lower() == b"authorization":
                authorization = value.decode("latin-1")
        token = http_token(authorization)
        return token is not None and self._tokens.lookup(token) is not None

    def _route(self, path: str, head: bytes) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if path != "/healthz" and not self._authorized(head):
            return 401, "text/plain; charset=utf-8", b"a token is needed: Authorization: Bearer TOKEN\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
        if path == "/healthz":
            reason = self._unhealthy()
            return (503 if reason else 200), "text/plain; charset=utf-8", f"{reason or 'ok'}\n".encode()
        if path in ("/", "/status", "/status.json"):
            document = status_document(TITLE, self._sections, time.time())
            if path == "/status.json":
                return 200, "application/json", json.dumps(document, indent=1).encode()
            return 200, "text/html; charset=utf-8", render_page(document, self._sections).encode()
        return 404, "text/plain; charset=utf-8", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain; charset=utf-8", b"GET only\n"
            else:
                status, ctype, body = self._route(path, head)
            challenge = 'WWW-Authenticate: Basic realm="fleetplane"\r\n' if status == 401 else ""
            header = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"{challenge}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(header.encode() + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a client that cannot speak HTTP gets the connection closed
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
