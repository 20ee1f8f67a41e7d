"""A plain h2c prior-knowledge client (RFC 9113 §3.3) for tests: several requests, one connection."""

from __future__ import annotations

import socket

import h2.config
import h2.connection
import h2.events

from tests.fakes.router import RouterProcess


def h2c_requests(
    r: RouterProcess, requests: list[tuple[str, str, bytes | None]]
) -> list[tuple[dict[str, str], bytes]]:
    """Each (method, path, body) as its own stream on one h2c prior-knowledge connection."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with socket.create_connection((r.host, r.port), timeout=10) as sock:
        streams: dict[int, tuple[dict[str, str], bytearray]] = {}
        for method, path, body in requests:
            sid = conn.get_next_available_stream_id()
            fields = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "r")]
            if body is not None:
                fields.append(("content-length", str(len(body))))
            conn.send_headers(sid, fields, end_stream=body is None)
            if body is not None:
                conn.send_data(sid, body, end_stream=True)
            streams[sid] = ({}, bytearray())
        sock.sendall(conn.data_to_send())
        done: set[int] = set()
        while len(done) < len(streams):
            data = sock.recv(65536)
            assert data, "connection closed early"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    streams[event.stream_id][0].update({k.decode(): v.decode() for k, v in event.headers})
                elif isinstance(event, h2.events.DataReceived):
                    streams[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    done.add(event.stream_id)
            sock.sendall(conn.data_to_send())
        return [(headers, bytes(body)) for headers, body in streams.values()]
