"""Chat requests to a router over HTTP/1.1 (``http.client`` or raw sockets) and how to read the answers."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

MODEL = "sim-model"


def post(
    url: str,
    path: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """POST over a fresh HTTP/1.1 connection: (status, lower-cased headers, body)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, data, {"content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def chat(model: str = MODEL, **fields: Any) -> dict[str, Any]:
    """A small chat body with extra top-level fields."""
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}


def engine_read(headers: dict[str, str]) -> dict[str, Any]:
    """What the engine read for the eight sampling fields (engine-sim's x-sim-sampling-params)."""
    return json.loads(headers["x-sim-sampling-params"])  # type: ignore[no-any-return]


def error_of(status: int, headers: dict[str, str], body: bytes) -> tuple[int, str, dict[str, Any]]:
    """(status, x-router-error-code, the envelope's error object) of an error answer."""
    envelope = json.loads(body)
    assert set(envelope) == {"error"}
    err = envelope["error"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert headers.get("x-router-error-code") == err["code"]
    return status, err["code"], err


def send_raw_chat(host: str, port: int, body: dict[str, object]) -> socket.socket:
    """POST ``body`` to /v1/chat/completions on a fresh raw HTTP/1.1 connection; the socket to read."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection((host, port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    return sock


def read_json_answer(sock: socket.socket, timeout_s: float = 10.0) -> tuple[bytes, bytes]:
    """Read one answer with a JSON body (until its closing brace or EOF); (head, body). Closes ``sock``."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body
