"""HTTP/1.1 framing at the router's front door (SPEC §5; RFC 9112): no desync, bodies read whole."""

from __future__ import annotations

import json
import socket

from tests.e2e.audit.conftest import MODEL, Answer, engine_read, envelope, exchange
from tests.fakes.router import RouterProcess


def answers(raw: bytes) -> list[Answer]:
    """Split a stream of content-length framed answers."""
    out: list[Answer] = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        answer = Answer(head + b"\r\n\r\n")
        size = int(answer.headers.get("content-length", "0"))
        answer.body, raw = rest[:size], rest[size:]
        out.append(answer)
    return out


def test_upgrade_request_with_a_body_is_refused_not_split_in_two(router: RouterProcess) -> None:
    """A POST carrying Upgrade: h2c and a body gets one 400; its body is never read as a request."""
    inner = b"GET /health HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n"
    raw = exchange(
        router,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: r\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
        b"Content-Length: " + str(len(inner)).encode() + b"\r\n\r\n" + inner,
    )
    [only] = answers(raw)
    assert only.status == 400
    assert envelope(only)["code"] == "bad_request"
    assert "Upgrade" in envelope(only)["message"]


def test_upgrade_without_a_body_is_ignored(router: RouterProcess) -> None:
    """GET with Upgrade: h2c is answered over HTTP/1.1 and the next pipelined request too."""
    raw = exchange(
        router,
        b"GET /health HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
        b"GET /v1/models HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n",
    )
    first, second = answers(raw)
    assert (first.status, second.status) == (200, 200)
    assert second.json()["data"][0]["id"] == MODEL


def test_chunked_body_with_extensions_and_trailers_is_judged(router: RouterProcess) -> None:
    """A chunked body (extensions, trailers) is read whole and judged like a plain one."""
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1}).encode()
    cut = len(body) // 2
    chunks = (
        f"{cut:x};ext=1\r\n".encode()
        + body[:cut]
        + b"\r\n"
        + f"{len(body) - cut:X}\r\n".encode()
        + body[cut:]
        + b"\r\n"
        + b"0\r\nX-Trailer: t\r\n\r\n"
    )
    raw = exchange(
        router,
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + chunks,
    )
    [only] = answers(raw)
    assert only.status == 200
    assert engine_read(only)["temperature"] == 0.5


def test_expect_100_continue_gets_the_interim_answer_then_the_real_one(router: RouterProcess) -> None:
    """Expect: 100-continue is answered 100 before the body is sent; the final answer follows."""

    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1, "n": 2}).encode()
    with socket.create_connection((router.host, router.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        rest = bytearray()
        while chunk := sock.recv(65536):
            rest += chunk
    [final] = answers(bytes(rest))
    assert final.status == 400
    assert envelope(final)["param"] == "n"


def test_conflicting_framing_is_refused(router: RouterProcess) -> None:
    """Content-Length together with Transfer-Encoding, or two lengths, is a 400 and a close."""
    for framing in (
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 2\r\nContent-Length: 3\r\n",
    ):
        raw = exchange(router, b"POST /v1/completions HTTP/1.1\r\nHost: r\r\n" + framing + b"\r\n0\r\n\r\n")
        [only] = answers(raw)
        assert only.status == 400
        assert only.headers["connection"] == "close"
