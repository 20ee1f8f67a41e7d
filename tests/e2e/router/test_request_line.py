"""A request line without an HTTP version (HTTP/0.9) is refused by the real router and engine-sim,
which share the HTTP server (SPEC §5; RFC 9112 §3)."""

from __future__ import annotations

import socket

import pytest

from tests.fakes.engine_sim import EngineSim
from tests.fakes.process import ListeningProcess
from tests.fakes.router import RouterProcess


def _exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("kind", ["router", "engine-sim"])
def test_http09_request_line_gets_400_and_close(kind: str) -> None:
    """``GET /health`` with no version: 400 bad_request in the envelope, then the server closes;
    ``GET /health HTTP/1.1`` on the same server is 200."""
    proc: ListeningProcess = RouterProcess() if kind == "router" else EngineSim()
    with proc:
        answer = _exchange(proc.port, b"GET /health\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"x-router-error-code: bad_request" in answer
        assert b"HTTP/0.9" in answer
        ok = _exchange(proc.port, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 ")
