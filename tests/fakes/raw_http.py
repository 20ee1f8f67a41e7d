"""Raw HTTP/1.1 bytes against a router process, and a worker that records what the router forwards.

A test that must see the exact bytes on the wire (SPEC §3.3 injection, §5 framing) writes the
request itself and parses the answer here; ``CaptureWorker`` keeps every forwarded request."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from tests.fakes.h2c import h2c_requests as h2c_requests
from tests.fakes.router import RouterProcess

MODEL = "audit-model"


CONTRACT = json.dumps(
    {
        "temperature": 0.5,
        "top_p": {"min": 0.1, "max": 0.9, "default": 0.8},
        "top_k": {"min": 1, "max": 50},
        "n": 1,
    }
)


class Answer:
    """One parsed HTTP/1.1 answer: status, lower-cased headers, body."""

    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.status_line = lines[0].decode()
        self.status = int(lines[0].split()[1])
        self.headers = {
            k.strip().lower().decode(): v.strip().decode()
            for k, _, v in (line.partition(b":") for line in lines[1:])
        }

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_code(self) -> str | None:
        return self.headers.get("x-router-error-code")


def exchange(r: RouterProcess, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send raw bytes on a fresh connection and read until the router closes it."""
    with socket.create_connection((r.host, r.port), timeout=timeout_s) as sock:
        sock.sendall(data)
        out = bytearray()
        while chunk := sock.recv(65536):
            out += chunk
        return bytes(out)


def kept_alive(r: RouterProcess, requests: list[bytes], timeout_s: float = 10.0) -> list[Answer]:
    """Send each raw request in turn on one connection the client keeps open; the answers (each
    read up to its Content-Length)."""
    answers = []
    with socket.create_connection((r.host, r.port), timeout=timeout_s) as sock:
        buf = b""
        for data in requests:
            sock.sendall(data)
            while b"\r\n\r\n" not in buf:
                buf += sock.recv(65536)
            head, _, rest = buf.partition(b"\r\n\r\n")
            size = int(Answer(head + b"\r\n\r\n").headers["content-length"])
            while len(rest) < size:
                rest += sock.recv(65536)
            answers.append(Answer(head + b"\r\n\r\n" + rest[:size]))
            buf = rest[size:]
    return answers


def request(r: RouterProcess, method: str, path: str, body: bytes | None = None, headers: str = "") -> Answer:
    """One HTTP/1.1 request (``Connection: close``) as raw bytes; the parsed answer."""
    head = f"{method} {path} HTTP/1.1\r\nHost: router\r\nConnection: close\r\n{headers}"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return Answer(exchange(r, head.encode() + b"\r\n" + (body or b"")))


def envelope(answer: Answer) -> dict[str, Any]:
    """The SPEC §5 error object, after checking the envelope's shape, type and header."""
    doc = answer.json()
    assert set(doc) == {"error"}
    err: dict[str, Any] = doc["error"]
    assert set(err) <= {"type", "code", "message", "param"}
    assert err["type"] == ("invalid_request_error" if answer.status < 500 else "server_error")
    assert answer.error_code == err["code"]
    return err


def engine_read(answer: Answer) -> dict[str, Any]:
    """The eight sampling values the engine read (engine-sim's ``x-sim-sampling-params``)."""
    return json.loads(answer.headers["x-sim-sampling-params"])  # type: ignore[no-any-return]


class CaptureWorker:
    """A minimal HTTP/1.1 worker on 127.0.0.1:0 that records every POST exactly as it arrived.

    Answers ``GET /server_info`` (HTTP/1.1, no h2c), ``GET /v1/models`` (``MODEL``) and
    ``GET /health``; every POST is recorded as (target, headers, body bytes) and answered
    ``200 {"ok":true}``, with the raw header lines of ``answer_headers`` first. Runs in a thread
    so the router process can reach it.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.heads: list[bytes] = []  # each recorded POST's head as it arrived (without CRLF CRLF)
        self.answer_headers = b""
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buf = bytearray()
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = bytes(buf).partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
                size = int(headers.get("content-length", "0"))
                while len(rest) < size:
                    data = conn.recv(65536)
                    if not data:
                        return
                    rest += data
                body, buf = rest[:size], bytearray(rest[size:])
                extra = b""
                if method == "GET" and target == "/server_info":
                    answer = b'{"enable_http2": false}'
                elif method == "GET" and target == "/v1/models":
                    answer = json.dumps(
                        {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                    ).encode()
                elif method == "GET":
                    answer = b"{}"
                else:
                    self.requests.append((target, headers, body))
                    self.heads.append(head)
                    answer = b'{"ok":true}'
                    extra = self.answer_headers
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\n"
                    + extra
                    + b"content-type: application/json\r\ncontent-length: "
                    + str(len(answer)).encode()
                    + b"\r\n\r\n"
                    + answer
                )

    def close(self) -> None:
        self._sock.close()
