"""HTTP/1.1 framing at the router's front door (SPEC §5; RFC 9112): no desync, bodies read whole."""

from __future__ import annotations

import json
import random
import re
import socket

from tests.fakes.engine_sim import EngineSim
from tests.fakes.h2c import h2c_requests
from tests.fakes.raw_http import CONTRACT, MODEL, Answer, engine_read, envelope, exchange
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


def test_sixty_mixed_pipelined_requests_are_answered_in_order(sim: EngineSim) -> None:
    """Pipelined chat/completions/generate/SSE/violations on one connection (one HTTP/1.1 and one
    h2c worker, 4 slots so some queue) come back complete and in order; the same over h2c streams."""
    rng = random.Random(5)
    requests: list[tuple[str, bytes, str]] = []
    for i in range(60):
        kind = rng.randrange(4)
        if kind == 0:
            path, body, want = "/v1/completions", {"prompt": f"p{i}", "max_tokens": 1 + i % 3}, "200"
        elif kind == 1:
            path, body, want = "/v1/completions", {"prompt": "x", "temperature": 0.9}, "400"
        elif kind == 2:
            chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": True}
            path, body, want = "/v1/chat/completions", chat, "200"
        else:
            path, body, want = (
                "/generate",
                {"text": "x", "sampling_params": {"max_new_tokens": 1 + i % 4}},
                "200",
            )
        requests.append((path, json.dumps({"model": MODEL, **body}).encode(), want))
    with (
        EngineSim("--model", MODEL, "--http2") as h2_sim,
        RouterProcess(
            "--worker",
            sim.url,
            "--worker",
            h2_sim.url,
            "--override-sampling-params",
            CONTRACT,
            "--max-concurrency",
            "4",
        ) as r,
    ):
        pipelined = b"".join(
            f"POST {path} HTTP/1.1\r\nHost: r\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            for path, body, _ in requests
        )
        raw = exchange(r, pipelined + b"GET /health HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")
        statuses = [s.decode() for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]
        assert statuses == [want for _, _, want in requests] + ["200"]
        streams = h2c_requests(r, [("POST", path, body) for path, body, _ in requests])
        assert [headers[":status"] for headers, _ in streams] == [want for _, _, want in requests]
