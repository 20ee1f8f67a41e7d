"""Chat completions over fresh HTTP/1.1 connections, streamed or whole, for router resilience checks."""

from __future__ import annotations

import http.client
import json
from typing import Any

MODEL = "sim-model"


def chat(max_tokens: int = 4, *, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens,
            "stream": stream,
        }
    ).encode()


def post_chat(
    port: int, max_tokens: int = 4, *, stream: bool = False, timeout_s: float = 20.0
) -> tuple[int, dict[str, str], bytes]:
    """One chat completion over a fresh HTTP/1.1 connection: (status, headers, whole body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            chat(max_tokens, stream=stream),
            {"content-type": "application/json"},
        )
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def open_stream(
    port: int, max_tokens: int, timeout_s: float = 20.0
) -> tuple[http.client.HTTPConnection, Any]:
    """Start a streaming chat completion and return once its head arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    conn.request(
        "POST", "/v1/chat/completions", chat(max_tokens, stream=True), {"content-type": "application/json"}
    )
    return conn, conn.getresponse()


def read_events(resp: Any) -> list[bytes]:
    """Every SSE record until the stream ends (a broken chunked stream ends the list)."""
    raw = b""
    try:
        while chunk := resp.read1(65536):
            raw += chunk
    except (http.client.IncompleteRead, ConnectionError):
        pass
    return [record for record in raw.split(b"\n\n") if record.strip()]
