"""Complete answers of an h2c worker as an HTTP/1.1 client reads them.

The router encodes an h2c worker's head for HTTP/1.1 once per header list (a worker repeating
its header block decodes to the same list) and frames each answer with its own Content-Length;
what a client reads must be what each answer says, whatever came before it on either connection.

The router's own ``Proxy`` behind a loopback front door (``tests.fakes.relay_case.RelayCase``),
a worker that the ``h2`` library serves over h2c on loopback, and a client reading with httptools.
"""

from __future__ import annotations

import asyncio
import json

import httptools

from tests.fakes.h2c_worker import H2cWorker
from tests.fakes.relay_case import MODEL, RelayCase

CONTRACT = '{"temperature": 0.5}'


HEADS: list[list[tuple[bytes, bytes]]] = []  # every request's header block, as the worker read it


class Worker(H2cWorker):
    """Answers each request with the status its ``user`` field names and ``max_tokens`` bytes,
    always with the same headers: one header block per status, repeated."""

    def request_ended(self, stream_id: int, body: bytes) -> None:
        HEADS.append(self.heads.pop(stream_id))
        fields = json.loads(body)
        status = int(fields.get("user", 200))  # the warm-up (``RelayCase.client``): 200
        data = b"b" * fields["max_tokens"] if status not in (204, 304) else b""
        head = [(b":status", b"%d" % status), (b"content-type", b"text/plain"), (b"x-worker", b"w1")]
        self.h2.send_headers(stream_id, head, end_stream=not data)
        if data:
            self.h2.send_data(stream_id, data, end_stream=True)


class Case(RelayCase):
    async def serve_worker(self) -> tuple[asyncio.Server, str, str]:
        server = await asyncio.get_running_loop().create_server(Worker, "127.0.0.1", 0)
        return server, f"h2c://127.0.0.1:{server.sockets[0].getsockname()[1]}", "h2c"


def request(status: int, size: int) -> bytes:
    fields = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    body = json.dumps({**fields, "max_tokens": size, "user": str(status)}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )


class Answers:
    """An HTTP/1.1 client's parse of the answers on its connection."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, list[tuple[bytes, bytes]], bytes]] = []
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self._headers, self._body))
        self._headers, self._body = [], b""


async def read_answer(
    reader: asyncio.StreamReader, answers: Answers
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    while not answers.done:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "the router closed the connection"
        answers.parser.feed_data(data)
    return answers.done.pop(0)


async def test_each_answer_has_its_own_status_length_and_body_over_a_shared_head() -> None:
    """Answers with the same header block and different sizes and statuses, in turn on one
    client connection and then on a second: each arrives whole, with the worker's headers, the
    router's contract revision, a Content-Length of its own body, and none on a 204."""
    sequence = [(200, 5), (200, 300), (404, 7), (200, 0), (204, 0), (200, 11), (404, 60_000), (200, 1)]
    async with Case("--override-sampling-params", CONTRACT) as case:
        for _ in range(2):
            reader, writer = await case.client()
            answers = Answers()
            for status, size in sequence:
                writer.write(request(status, size))
                got_status, headers, body = await read_answer(reader, answers)
                names = [name for name, _ in headers]
                assert got_status == status
                assert (b"content-type", b"text/plain") in headers and (b"x-worker", b"w1") in headers
                assert names.count(b"x-contract-revision") == 1
                assert b"connection" not in names and b"transfer-encoding" not in names
                if status == 204:
                    assert b"content-length" not in names and body == b""
                else:
                    assert names.count(b"content-length") == 1
                    assert dict(headers)[b"content-length"] == b"%d" % size
                    assert body == b"b" * size
            writer.close()
            await writer.wait_closed()
        assert case.router is not None
        stats = case.router.metrics.route("/v1/chat/completions")
        assert dict(stats.by_status) == {200: 2 * (1 + 5), 404: 2 * 2, 204: 2}  # with the warm-ups


async def test_an_http1_clients_headers_reach_the_h2c_worker_lower_cased_in_order() -> None:
    """Whether the front door read the head from its bytes (plain lines, twice: the second from
    the router's list of lines read before) or listed it (TE, dropped by name), the worker gets
    the client's end-to-end fields, lower-cased, in order, without the trailing whitespace an h2
    field may not have (RFC 9113 §8.2.1), and none of Host, Connection, TE."""
    plain = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nX-Trace:  a b \r\nUser-Agent: t/1\r\n"
        b"Connection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    )
    fields = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    body = json.dumps(fields).encode()
    listed = plain.replace(b"User-Agent: t/1", b"TE: trailers")
    async with Case("--override-sampling-params", CONTRACT) as case:
        reader, writer = await case.client()
        answers = Answers()
        for raw in (plain, plain, listed):
            HEADS.clear()
            writer.write(raw % (len(body), body))
            assert (await read_answer(reader, answers))[0] == 200
            [head] = HEADS
            regular = [(name, value) for name, value in head if not name.startswith(b":")]
            expected = [(b"x-trace", b"a b")]  # its trailing space no part of it (RFC 9110 §5.5)
            expected += [] if raw is listed else [(b"user-agent", b"t/1")]
            assert regular[: len(expected) + 1] == [*expected, (b"content-type", b"application/json")]
            names = [name for name, _ in regular]
            assert not {b"host", b"connection", b"te"} & set(names)
        writer.close()
        await writer.wait_closed()
