"""h2 connection logic against an in-memory h2 client (no sockets): bodies survive any framing."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.context import ServerContext
from dataplane.http.http2 import Http2Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import Request, Responder
from dataplane.http.wire import H2_PREFACE
from tests.fakes.transport import RecordingTransport


async def _echo_twice(req: Request, resp: Responder) -> None:
    """Streams the body back twice: once whole, once in 1000-byte writes."""
    resp.start(200, [(b"x-len", b"%d" % len(req.body))])
    await resp.write(req.body)
    for i in range(0, len(req.body), 1000):
        await resp.write(req.body[i : i + 1000])
    resp.end()


async def _exchange(bodies: list[bytes], cut: int, limits: dict[str, Any]) -> dict[int, tuple[int, bytes]]:
    """Send every body on its own stream; shuttle bytes both ways in ``cut``-sized pieces."""
    loop = asyncio.get_running_loop()
    server = Http2Connection(ServerContext(handler=_echo_twice, limits=ServerLimits(**limits), loop=loop))
    transport = RecordingTransport()
    server.connection_made(transport)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    answers: dict[int, tuple[int, bytearray]] = {}
    ended: set[int] = set()
    pending: dict[int, memoryview] = {}
    for body in bodies:
        sid = client.get_next_available_stream_id()
        client.send_headers(
            sid, [(b":method", b"POST"), (b":path", b"/"), (b":scheme", b"http"), (b":authority", b"t")]
        )
        pending[sid] = memoryview(body)
        answers[sid] = (0, bytearray())

    def client_send() -> None:
        for sid, view in list(pending.items()):
            while view:
                n = min(client.local_flow_control_window(sid), client.max_outbound_frame_size, len(view))
                if n <= 0:
                    break
                client.send_data(sid, bytes(view[:n]))
                view = view[n:]
            pending[sid] = view
            if not view:
                client.end_stream(sid)
                del pending[sid]

    quiet = 0  # rounds without a byte either way: give up after a few dozen
    while quiet < 50:
        client_send()
        out = client.data_to_send()
        for i in range(0, len(out), cut):
            server.data_received(out[i : i + cut])
        await asyncio.sleep(0)
        back, transport.out = bytes(transport.out), bytearray()
        for i in range(0, len(back), cut):
            for ev in client.receive_data(back[i : i + cut]):
                if isinstance(ev, h2.events.ResponseReceived):
                    answers[ev.stream_id] = (int(dict(ev.headers)[b":status"]), answers[ev.stream_id][1])
                elif isinstance(ev, h2.events.DataReceived):
                    answers[ev.stream_id][1].extend(ev.data)
                    client.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended.add(ev.stream_id)
        if len(ended) == len(bodies) and not out and not back:
            break
        quiet = 0 if out or back else quiet + 1
    assert ended == set(answers), "some streams never ended"
    return {sid: (status, bytes(data)) for sid, (status, data) in answers.items()}


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=4),
    st.integers(min_value=700, max_value=70_000),
)
def test_bodies_survive_any_framing_and_windows(sizes: list[int], cut: int) -> None:
    """Concurrent uploads and streamed answers arrive intact whatever the read sizes and windows."""
    bodies = [bytes((i * 7 + n) % 251 for i in range(n)) for n in sizes]
    answers = asyncio.run(
        _exchange(bodies, cut, {"h2_initial_window_bytes": 65535, "h2_connection_window_bytes": 65535})
    )
    for (status, data), body in zip(answers.values(), bodies, strict=True):
        assert status == 200
        assert data == body + body


def test_body_over_the_limit_is_refused_and_others_answered() -> None:
    """A stream whose data passes max_body_bytes gets 413; its neighbours are answered normally."""
    answers = asyncio.run(_exchange([b"a" * 10, b"b" * 5000, b"c" * 20], 4096, {"max_body_bytes": 1000}))
    statuses = [status for status, _ in answers.values()]
    assert statuses == [200, 413, 200]


def test_preface_constant_matches_the_h2_library() -> None:
    """The preface used for detection is the one python-h2 clients send."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    assert client.data_to_send().startswith(H2_PREFACE)
