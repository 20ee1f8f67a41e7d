"""Dialing a load publisher (adapter): resolve, connect, ZMTP handshake, subscription.

The connecting half of the ingest (``subscriber.py`` owns the connections once they are
established and reads them). One call is one attempt; retrying and backoff are the
caller's. Bounded: a connect ends with the kernel's SYN retries, as libzmq's
(``ZMQ_CONNECT_TIMEOUT`` 0), without a timer per attempt; the handshake that follows
within ``HANDSHAKE_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
from dataclasses import dataclass

from controlplane.load.ingest.zmtp import (
    GREETING,
    GREETING_BYTES,
    FrameReader,
    check_greeting,
    ready_command,
    subscribe_message,
)

# The ZMTP handshake; libzmq's handshake interval is 30 s, a loopback one takes ms.
HANDSHAKE_TIMEOUT_S = 10.0
_HANDSHAKE_RECV_BYTES = 16 * 1024
# A silently dead engine host is detected by TCP keepalive (then we reconnect), not by
# ZMTP heartbeats: SGLang's publisher does not enable them (we answer PINGs regardless).
TCP_KEEPALIVE_IDLE_S = 10
TCP_KEEPALIVE_INTVL_S = 5
TCP_KEEPALIVE_CNT = 3


class SubscribeError(ValueError):
    """An endpoint that is not ``tcp://HOST:PORT``."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed ``tcp://HOST:PORT``; ``numeric`` when HOST is an address (no resolver)."""

    host: str
    port: int
    family: int
    numeric: bool


@dataclass(slots=True)
class Dialed:
    """A socket through the handshake and subscribed, its reader, and any early messages."""

    sock: socket.socket
    reader: FrameReader
    early: list[list[bytes]]


def parse_endpoint(endpoint: str) -> Endpoint:
    """The parts of ``tcp://HOST:PORT`` (IPv6 literals in brackets).

    A host name resolves to IPv4 only, as libzmq's with ``ZMQ_IPV6`` off (what SGLang's
    publisher binds for a non-IPv6 endpoint).
    """
    if not endpoint.startswith("tcp://"):
        raise SubscribeError(f"not a tcp:// endpoint: {endpoint!r}")
    host, sep, port_text = endpoint[6:].rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SubscribeError(f"not tcp://HOST:PORT: {endpoint!r}")
    family = socket.AF_INET
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], socket.AF_INET6
    return Endpoint(host, int(port_text), family, _is_address(host, family))


async def dial(endpoint: Endpoint, topic: bytes, max_frame_bytes: int) -> Dialed:
    """One attempt; raises ``OSError``, ``ZmtpError`` or ``TimeoutError``."""
    loop = asyncio.get_running_loop()
    addresses: list[tuple[int, int, int, tuple[object, ...]]]
    if endpoint.numeric:  # no resolver round trip (a thread) per attempt for an address
        addresses = [(endpoint.family, socket.SOCK_STREAM, 0, (endpoint.host, endpoint.port))]
    else:
        infos = await loop.getaddrinfo(
            endpoint.host, endpoint.port, family=endpoint.family, type=socket.SOCK_STREAM
        )
        addresses = [(family, kind, proto, address) for family, kind, proto, _, address in infos]
    error: OSError = OSError(f"{endpoint.host} resolves to no address")
    for family, kind, proto, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            # A refused connect fails here at once, without a timer or a writer: a
            # thousand ranks of stopped engines retry 500 times a second.
            status = sock.connect_ex(address)
            if status not in (0, errno.EINPROGRESS, errno.EAGAIN):
                raise OSError(status, os.strerror(status))
            if status != 0:
                await _connected(loop, sock)
            _tune(sock)
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                reader, early = await _handshake(loop, sock, topic, max_frame_bytes)
            return Dialed(sock, reader, early)
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error


def describe(exc: BaseException) -> str:
    """A failed attempt in a few words for the operator ("connection refused", "handshake timed out")."""
    if isinstance(exc, TimeoutError):
        return f"no ZMTP handshake within {HANDSHAKE_TIMEOUT_S:g} s"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__


async def _connected(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    done = loop.create_future()
    loop.add_writer(sock.fileno(), _settle, done)
    try:
        await done
    finally:
        loop.remove_writer(sock.fileno())
    status = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if status:
        raise OSError(status, os.strerror(status))


async def _handshake(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, topic: bytes, max_frame_bytes: int
) -> tuple[FrameReader, list[list[bytes]]]:
    await loop.sock_sendall(sock, GREETING)
    greeting = b""
    while len(greeting) < GREETING_BYTES:
        # Exactly the greeting: libzmq sends it in two parts, READY follows it.
        chunk = await loop.sock_recv(sock, GREETING_BYTES - len(greeting))
        if not chunk:
            raise ConnectionError("closed during the greeting")
        greeting += chunk
    check_greeting(greeting)
    await loop.sock_sendall(sock, ready_command())
    reader = FrameReader(max_frame_bytes)
    early: list[list[bytes]] = []
    while reader.ready is None:
        chunk = await loop.sock_recv(sock, _HANDSHAKE_RECV_BYTES)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        early += reader.feed(chunk)
    await loop.sock_sendall(sock, subscribe_message(topic) + b"".join(reader.replies))
    reader.replies.clear()
    return reader, early


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _is_address(host: str, family: int) -> bool:
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return False
    return version == (6 if family == socket.AF_INET6 else 4)


def _tune(sock: socket.socket) -> None:
    """TCP keepalive (a dead host is noticed, then reconnected) and no Nagle for the tiny writes."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; macOS has only TCP_KEEPALIVE
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, TCP_KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, TCP_KEEPALIVE_INTVL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, TCP_KEEPALIVE_CNT)
