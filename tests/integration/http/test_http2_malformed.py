"""Malformed h2c requests are stream errors (RFC 9113 §8.1.1): 400 + RST_STREAM on that stream only,
the connection and its other streams go on, the handler never sees the request."""

from __future__ import annotations

import asyncio
import json

import pytest
from h2.errors import ErrorCodes

from dataplane.http import Request, Responder
from tests.fakes.http_server import H2Client, H2Stream, serving

Fields = list[tuple[bytes, bytes]]

M, P, S, A = (b":method", b"POST"), (b":path", b"/bad"), (b":scheme", b"http"), (b":authority", b"t")

# Header blocks that RFC 9113 §8.2 / §8.3 (and RFC 9110 §7.2, §8.6) call malformed.
BAD_HEADS: dict[str, Fields] = {
    "upper-case name": [M, P, S, A, (b"X-Upper", b"1")],
    "connection": [M, P, S, A, (b"connection", b"keep-alive")],
    "keep-alive": [M, P, S, A, (b"keep-alive", b"timeout=5")],
    "proxy-connection": [M, P, S, A, (b"proxy-connection", b"close")],
    "transfer-encoding": [M, P, S, A, (b"transfer-encoding", b"chunked")],
    "upgrade": [M, P, S, A, (b"upgrade", b"websocket")],
    "te other than trailers": [M, P, S, A, (b"te", b"gzip")],
    "missing :path": [M, S, A],
    "missing :method": [P, S, A],
    "missing :scheme": [M, P, A],
    "empty :path": [M, (b":path", b""), S, A],
    "relative :path": [M, (b":path", b"bad"), S, A],
    "duplicated :path": [M, P, P, S, A],
    "duplicated :method": [M, M, P, S, A],
    "pseudo after regular": [M, S, A, (b"x-a", b"1"), P],
    "unknown pseudo": [M, P, S, A, (b":foo", b"1")],
    "response pseudo": [M, P, S, A, (b":status", b"200")],
    ":protocol without extended CONNECT": [M, P, S, A, (b":protocol", b"websocket")],
    "colon inside a name": [M, P, S, A, (b"x:y", b"1")],
    "space in a name": [M, P, S, A, (b"x y", b"1")],
    "empty name": [M, P, S, A, (b"", b"1")],
    "NUL in a value": [M, P, S, A, (b"x-a", b"a\x00b")],
    "LF in a value": [M, P, S, A, (b"x-a", b"a\nb")],
    "leading space in a value": [M, P, S, A, (b"x-a", b" a")],
    "trailing tab in a value": [M, P, S, A, (b"x-a", b"a\t")],
    "non-numeric content-length": [M, P, S, A, (b"content-length", b"1x")],
    "conflicting content-lengths": [M, P, S, A, (b"content-length", b"1"), (b"content-length", b"2")],
    "two hosts": [M, P, S, (b"host", b"a"), (b"host", b"b")],
    "host differs from :authority": [M, P, S, A, (b"host", b"other")],
    "neither :authority nor host": [M, P, S],
}


async def echo(req: Request, resp: Responder) -> None:
    """Answers with the path and body; ``/slow`` first waits a little (in flight meanwhile)."""
    seen.append(req.path)
    if req.path == b"/slow":
        await asyncio.sleep(0.2)
    resp.respond(200, [(b"content-type", b"text/plain")], req.path + b" " + req.body)


seen: list[bytes] = []


async def _open_raw(port: int) -> H2Client:
    client = await H2Client.open(port)
    # Let the client send what a broken peer would.
    client.conn.config.validate_outbound_headers = False
    client.conn.config.normalize_outbound_headers = False
    return client


def _send(client: H2Client, fields: Fields, end: bool) -> int:
    sid: int = client.conn.get_next_available_stream_id()
    client.streams[sid] = H2Stream()
    client.conn.send_headers(sid, fields, end_stream=end)
    client.flush()
    return sid


async def _assert_malformed(client: H2Client, sid: int, reset: int | None) -> None:
    """The stream got a 400 bad_request and then the expected RST_STREAM code (or none)."""
    st = await client.response(sid)
    for _ in range(100):  # the RST_STREAM may arrive in a later read than the answer
        if st.reset is not None or reset is None:
            break
        await asyncio.sleep(0.01)
    assert st.status == 400
    assert json.loads(bytes(st.body))["error"]["code"] == "bad_request"
    assert json.loads(bytes(st.body))["error"]["message"].startswith("malformed HTTP/2 request")
    assert st.reset == reset


async def _around(client: H2Client, before: int, after: int) -> None:
    """Requests opened before and after the bad one on the same connection complete normally."""
    for sid, body in ((before, b"/slow b"), (after, b"/ok a")):
        st = await client.response(sid)
        assert st.reset is None and st.status == 200 and bytes(st.body) == body
    assert client.terminated is None and not client.closed.is_set()
    assert b"/bad" not in seen and b"bad" not in seen


@pytest.mark.parametrize("kind", list(BAD_HEADS))
async def test_malformed_head_resets_only_its_stream(kind: str) -> None:
    """A malformed header block still being sent gets 400 + RST_STREAM(PROTOCOL_ERROR); others go on."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        before = client.request(b"POST", b"/slow", b"b")
        sid = _send(client, BAD_HEADS[kind], end=False)
        after = client.request(b"POST", b"/ok", b"a")
        await _assert_malformed(client, sid, ErrorCodes.PROTOCOL_ERROR)
        await _around(client, before, after)
        await client.close()


async def test_malformed_head_that_ends_the_stream_is_closed_by_the_400() -> None:
    """A malformed request the client already ended gets a complete 400 (§8.1.1: "closing")."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        before = client.request(b"POST", b"/slow", b"b")
        sid = _send(client, BAD_HEADS["upper-case name"], end=True)
        after = client.request(b"POST", b"/ok", b"a")
        await _assert_malformed(client, sid, None)
        await _around(client, before, after)
        await client.close()


async def test_request_led_by_an_informational_status_is_malformed() -> None:
    """A request block led by ":status: 100" gets 400 bad_request, not taken for a response the
    connection fails over: the next request on the connection is served (raw frames: h2's client
    refuses to send such a block)."""
    import hpack

    def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload

    seen.clear()
    encoder = hpack.Encoder()
    async with serving(echo) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + frame(4, 0, 0, b"")
            + frame(1, 5, 1, encoder.encode([(b":status", b"100"), M, P, S, A]))
            + frame(1, 5, 3, encoder.encode([M, (b":path", b"/ok"), S, A]))
        )
        decoder = hpack.Decoder()
        answers: dict[int, tuple[bytes, bytes]] = {}
        ended: set[int] = set()
        while ended != {1, 3}:
            head = await asyncio.wait_for(reader.readexactly(9), 5)
            payload = await reader.readexactly(int.from_bytes(head[:3], "big"))
            sid = int.from_bytes(head[5:9], "big")
            if head[3] == 1:
                answers[sid] = (dict(decoder.decode(payload, raw=True))[b":status"], b"")
            elif head[3] == 0 and sid in answers:
                answers[sid] = (answers[sid][0], answers[sid][1] + payload)
            elif head[3] in (3, 7):
                raise AssertionError(f"RST_STREAM or GOAWAY: {head + payload!r}")
            if head[3] in (0, 1) and head[4] & 1:
                ended.add(sid)
        writer.close()
    assert answers[1][0] == b"400" and json.loads(answers[1][1])["error"]["code"] == "bad_request"
    assert answers[3] == (b"200", b"/ok ")
    assert b"/bad" not in seen


# (content-length, DATA frames, whether the client ends the stream with the last one)
BAD_LENGTHS = {
    "more DATA than content-length, ended": (b"3", [b"abcdef"], True),
    "more DATA than content-length, still sending": (b"3", [b"ab", b"cd"], False),
    "less DATA than content-length": (b"10", [b"abc", b"de"], True),
    "content-length without DATA": (b"4", [], True),
}


@pytest.mark.parametrize("kind", list(BAD_LENGTHS))
async def test_content_length_mismatch_is_a_stream_error(kind: str) -> None:
    """DATA that does not add up to content-length gets 400 (+ RST while sending); others go on."""
    seen.clear()
    length, frames, end = BAD_LENGTHS[kind]
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        before = client.request(b"POST", b"/slow", b"b")
        sid = _send(client, [M, P, S, A, (b"content-length", length)], end=end and not frames)
        for i, frame in enumerate(frames):
            client.conn.send_data(sid, frame, end_stream=end and i == len(frames) - 1)
        client.flush()
        after = client.request(b"POST", b"/ok", b"a")
        await _assert_malformed(client, sid, None if end else ErrorCodes.PROTOCOL_ERROR)
        await _around(client, before, after)
        await client.close()


async def test_matching_content_length_is_served() -> None:
    """A content-length equal to the DATA received (over several frames) is an ordinary request."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        sid = _send(client, [M, (b":path", b"/ok"), S, A, (b"content-length", b"5")], end=False)
        client.conn.send_data(sid, b"ab")
        client.conn.send_data(sid, b"cde", end_stream=True)
        client.flush()
        st = await client.response(sid)
        assert (st.status, bytes(st.body), st.reset) == (200, b"/ok abcde", None)
        await client.close()


@pytest.mark.parametrize(
    "trailers",
    [[(b":path", b"/x")], [(b"connection", b"close")], [(b"X-Upper", b"1")], [(b":status", b"100")]],
    ids=["pseudo-header", "connection-specific", "upper-case", "informational status"],
)
async def test_malformed_trailers_are_a_stream_error(trailers: Fields) -> None:
    """Trailers with a pseudo-header or a forbidden field make the request malformed: 400, not served."""
    from hyperframe.frame import HeadersFrame

    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        before = client.request(b"POST", b"/slow", b"b")
        sid = _send(client, [M, P, S, A], end=False)
        client.conn.send_data(sid, b"body")
        client.flush()
        # Built by hand: h2's client refuses to send a block led by ":status: 1xx".
        block = HeadersFrame(sid)
        block.data = client.conn.encoder.encode(trailers)
        block.flags.add("END_HEADERS")
        block.flags.add("END_STREAM")
        client.writer.write(block.serialize())
        after = client.request(b"POST", b"/ok", b"a")
        await _assert_malformed(client, sid, None)
        await _around(client, before, after)
        await client.close()


async def test_header_block_without_end_stream_after_the_request_is_a_stream_error() -> None:
    """A second HEADERS without END_STREAM (RFC 9113 §8.1) gets 400 + RST_STREAM(PROTOCOL_ERROR); the
    client's further frames on that stream, even a third block, leave the connection alone."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        before = client.request(b"POST", b"/slow", b"b")
        sid = _send(client, [M, P, S, A], end=False)
        client.conn.send_data(sid, b"body")
        client.flush()
        # Frames h2's client state machine refuses to build: trailers that do not end the stream,
        # a third block, then more DATA.
        from hyperframe.frame import DataFrame, HeadersFrame

        blocks = []
        for fields in ([(b"x-t", b"1")], [(b"x-u", b"2")]):
            block = HeadersFrame(sid)
            block.data = client.conn.encoder.encode(fields)
            block.flags.add("END_HEADERS")
            blocks.append(block.serialize())
        more = DataFrame(sid)
        more.data = b"late"
        client.writer.write(b"".join(blocks) + more.serialize())
        after = client.request(b"POST", b"/ok", b"a")
        await _assert_malformed(client, sid, ErrorCodes.PROTOCOL_ERROR)
        await _around(client, before, after)
        await client.close()


async def test_valid_trailers_are_accepted() -> None:
    """Ordinary trailers (lower-case names, no pseudo-headers) leave the request served."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        sid = _send(client, [M, (b":path", b"/ok"), S, A, (b"te", b"trailers")], end=False)
        client.conn.send_data(sid, b"body")
        client.conn.send_headers(sid, [(b"x-checksum", b"1")], end_stream=True)
        client.flush()
        st = await client.response(sid)
        assert (st.status, bytes(st.body)) == (200, b"/ok body")
        await client.close()


async def test_framing_errors_stay_connection_errors() -> None:
    """A HEADERS frame on a stream the client already ended is still GOAWAY(STREAM_CLOSED or PROTOCOL_ERROR)."""
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        sid = client.request(b"GET", b"/ok")
        await client.response(sid)
        # Forge HEADERS on the closed stream: bypass the client's own state machine.
        from hyperframe.frame import HeadersFrame

        frame = HeadersFrame(sid)
        frame.data = client.conn.encoder.encode([M, P, S, A])
        frame.flags.add("END_HEADERS")
        frame.flags.add("END_STREAM")
        client.writer.write(frame.serialize())
        await asyncio.wait_for(client.closed.wait(), 5)
        assert client.terminated is not None
        assert client.terminated.error_code in (ErrorCodes.STREAM_CLOSED, ErrorCodes.PROTOCOL_ERROR)
        await client.close()


async def test_content_length_of_thousands_of_digits_is_413() -> None:
    """A 5000-digit content-length is refused with 413 on its stream; the connection goes on."""
    seen.clear()
    async with serving(echo) as server:
        client = await _open_raw(server.port)
        sid = _send(client, [M, P, S, A, (b"content-length", b"9" * 5000)], end=False)
        after = client.request(b"POST", b"/ok", b"a")
        st = await client.response(sid)
        assert st.status == 413
        ok = await client.response(after)
        assert (ok.status, bytes(ok.body)) == (200, b"/ok a")
        assert client.terminated is None
        await client.close()
