"""Plain h2c prior-knowledge clients (RFC 9113 §3.3) on the ``h2`` library: one request on a fresh
connection (``h2c_request``), or several requests as streams of one connection (``h2c_requests``)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

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


@dataclass
class H2Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def h2c_request(
    host: str, port: int, method: str, path: str, body: bytes = b"", timeout_s: float = 10.0
) -> H2Reply:
    """One request over a fresh h2c (prior knowledge) connection."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        conn.initiate_connection()
        headers = [
            (":method", method),
            (":path", path),
            (":scheme", "http"),
            (":authority", f"{host}:{port}"),
        ]
        if body:
            headers += [("content-type", "application/json"), ("content-length", str(len(body)))]
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers, end_stream=not body)
        if body:
            conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status, got, data = 0, {}, bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("h2c connection closed before the answer ended")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                    got = {str(k): str(v) for k, v in event.headers}
                    status = int(got[":status"])
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    return H2Reply(status, got, bytes(data))
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    raise ConnectionError(f"stream reset {event.error_code}")
            sock.sendall(conn.data_to_send())
