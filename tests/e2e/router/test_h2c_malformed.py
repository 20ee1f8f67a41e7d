"""Malformed h2c requests at the router (RFC 9113 §8.1.1): refused on their own stream, counted,
never forwarded; the other streams of the shared connection go on."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes

from tests.fakes.raw_http import MODEL, CaptureWorker
from tests.fakes.router import RouterProcess, series

PATH = "/v1/completions"
GOOD = json.dumps({"model": MODEL, "prompt": "x", "temperature": 0.5}).encode()
BASE = [(":method", "POST"), (":path", PATH), (":scheme", "http"), (":authority", "r")]


@pytest.fixture(scope="module")
def router(capture: CaptureWorker) -> Iterator[RouterProcess]:
    """A router (no request yet) in front of the recording worker."""
    with RouterProcess("--worker", capture.url) as r:
        yield r


def test_malformed_streams_are_refused_alone_counted_and_not_forwarded(
    router: RouterProcess, capture: CaptureWorker
) -> None:
    """Two malformed streams between two good ones: 400 bad_request each (one also RST_STREAM
    PROTOCOL_ERROR), the good ones reach the worker and answer 200, the connection stays open, and
    fleetplane_requests_total counts the two 400s."""
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
    )
    conn.initiate_connection()
    before = len(capture.requests)
    with socket.create_connection((router.host, router.port), timeout=10) as sock:
        plan = [
            ([*BASE, ("content-length", str(len(GOOD)))], [GOOD], True),  # good
            ([*BASE, ("X-Upper", "1")], [GOOD], False),  # upper-case name, client still sending
            ([*BASE, ("content-length", "3")], [GOOD], True),  # DATA longer than content-length
            ([*BASE, ("content-length", str(len(GOOD)))], [GOOD], True),  # good
        ]
        sids = []
        for fields, frames, end in plan:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, fields)
            for frame in frames:
                conn.send_data(sid, frame, end_stream=end)
            sids.append(sid)
        sock.sendall(conn.data_to_send())
        status: dict[int, str] = {}
        bodies: dict[int, bytearray] = {sid: bytearray() for sid in sids}
        resets: dict[int, int] = {}
        ended: set[int] = set()
        terminated = False
        while len(ended) < len(sids) or sids[1] not in resets:
            data = sock.recv(65536)
            assert data, "connection closed"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status[event.stream_id] = dict(event.headers)[b":status"].decode()
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    resets[event.stream_id] = event.error_code
                    ended.add(event.stream_id)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    terminated = True
            sock.sendall(conn.data_to_send())
        # The connection still serves a new stream after the refusals.
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [(":method", "GET"), (":path", "/health"), (":scheme", "http"), (":authority", "r")],
            end_stream=True,
        )
        sock.sendall(conn.data_to_send())
        health = ""
        while not health:
            data = sock.recv(65536)
            assert data, "connection closed"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    health = dict(event.headers)[b":status"].decode()
    assert not terminated
    good, upper, longer, good2 = sids
    assert (status[good], status[good2]) == ("200", "200")
    assert (status[upper], status[longer]) == ("400", "400")
    assert json.loads(bodies[upper])["error"]["code"] == "bad_request"
    assert resets.get(upper) == ErrorCodes.PROTOCOL_ERROR
    assert good not in resets and good2 not in resets
    assert health == "200"
    forwarded = capture.requests[before:]
    assert [(target, body) for target, _, body in forwarded] == [(PATH, GOOD), (PATH, GOOD)]
    m = router.metrics()
    assert m[series("fleetplane_requests_total", route=PATH, code="400")] == 2
    assert m[series("fleetplane_requests_total", route=PATH, code="200")] == 2
