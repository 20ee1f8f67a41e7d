"""A worker's whole HTTP/1.1 answers to HTTP/1.1 clients, on the path that reads the answer's
head without listing its headers (``H1Connection._lean_head``) and lists them only when the
answer cannot go as it came: what a client reads is the worker's status, headers and body in
every case, over real loopback sockets.

The router's own ``Proxy`` behind a loopback front door, one scripted HTTP/1.1 worker
(``tests.fakes.relay_case``); each case's request names how the worker answers it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httptools

from tests.fakes.polling import until
from tests.fakes.relay_case import MODEL, Http1Case, is_warm_up

BODY = b'{"object":"chat.completion","choices":[]}'


def _request(case: str, close: bool = False) -> bytes:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": case}]}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
        + (b"connection: close\r\n" if close else b"")
        + b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )


def _head(case: str, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 201 Created\r\nx-case: %s\r\nContent-Type: application/json\r\n%scontent-length: %d\r\n\r\n"
        % (case.encode(), extra, len(BODY))
    )


class _Client:
    """What an HTTP/1.1 client reads: each answer's status, headers (lower-cased) and body."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[bytes, bytes], bytes]] = []
        self._headers: dict[bytes, bytes] = {}
        self._body = b""
        self._parser = httptools.HttpResponseParser(self)

    def feed(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.answers.append((self._parser.get_status_code(), self._headers, self._body))
        self._headers, self._body = {}, b""


class _Cases:
    """The cases the worker was asked, in order: each request's message names its case."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def small(self, fields: dict[str, Any]) -> bool:
        """``Http1Case``'s choice: the warm-up gets the small answer, every case is recorded."""
        if is_warm_up(fields):
            return True
        self.names.append(fields["messages"][0]["content"])
        return False


async def _answers(reader: asyncio.StreamReader, n: int) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    client = _Client()
    while len(client.answers) < n:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, f"the connection closed after {len(client.answers)} answers"
        client.feed(data)
    return client.answers


async def test_every_answer_reaches_the_client_with_the_workers_headers() -> None:
    """Whole in one write; head and body in two reads; after a 103; with a Keep-Alive header
    (which must not pass); then whole again: each answer arrives with its status, the worker's
    own headers and its body, and the connection to the worker stays in use."""
    cases = _Cases()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        case = cases.names[-1]
        if case == "split":
            writer.write(_head(case))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(BODY)
        elif case == "early":
            writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + _head(case) + BODY)
        elif case == "keep-alive":
            writer.write(_head(case, b"Keep-Alive: timeout=5\r\n") + BODY)
        else:
            writer.write(_head(case) + BODY)
        await writer.drain()

    async with Http1Case(answer, small=cases.small) as case:
        reader, writer = await case.client()
        sequence = ["whole", "split", "early", "keep-alive", "whole-again"]
        for name in sequence:
            writer.write(_request(name))
            ((status, headers, body),) = await _answers(reader, 1)
            assert (status, body) == (201, BODY), name
            assert headers[b"x-case"] == name.encode() and headers[b"content-type"] == b"application/json"
            assert headers[b"content-length"] == b"%d" % len(BODY)
            assert b"keep-alive" not in headers and b"connection" not in headers
        assert cases.names == sequence
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 201: len(sequence)}))
        assert not case.worker_conn_closed.is_set()
        writer.close()


async def test_an_answer_whose_client_closes_after_the_next_request_keeps_its_headers() -> None:
    """Two requests pipelined in one write, the second with ``connection: close``: the first
    was sent to the worker while its answer could still go as it came, and arrives once the
    client connection is closing, so its head is written anew from the worker's headers; both
    answers arrive whole, then the router closes the connection."""
    cases = _Cases()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_head(cases.names[-1]) + BODY)
        await writer.drain()

    async with Http1Case(answer, small=cases.small) as case:
        reader, writer = await case.client()
        writer.write(_request("first") + _request("last", close=True))
        answers = await _answers(reader, 2)
        assert [(s, h[b"x-case"], h[b"content-type"], b) for s, h, b in answers] == [
            (201, b"first", b"application/json", BODY),
            (201, b"last", b"application/json", BODY),
        ]
        assert answers[1][1][b"connection"] == b"close"
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed after the last answer
        writer.close()
