"""Cost of per-stream request validation on the h2c hot path (``dataplane/http/h2_fields``).

Same run, interleaved rounds: N request HEADERS frames (a proxy-like header list, HPACK
dynamic table warm as on a long-lived connection) fed to

- ``h2 validates``: ``H2Connection`` with ``validate_inbound_headers=True`` plus the pseudo-header
  loop ``http2`` ran before (the previous code path: a malformed request is a GOAWAY);
- ``own checks``: the server's own codec (``h2_server_codec.ServerCodec``, which replaced h2 in
  the front door) plus ``request_fields`` (a malformed request is a stream error); each stream is
  closed with a one-field answer (``:status 204``), as h2's streams are dropped;
- ``own, new ids``: the same with a new ``x-request-id`` per request (the blocks change the HPACK
  dynamic table, so the codec's decode cache never hits: every block goes through ``hpack``).

    .venv/bin/python bench/h2_fields.py [--requests 5000] [--rounds 5]

CPU per request (process time), best of the rounds; the ratio is the figure to trust.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from h2.config import H2Configuration  # noqa: E402
from h2.connection import H2Connection  # noqa: E402
from h2.events import RequestReceived  # noqa: E402

from dataplane.http.h2_fields import request_fields  # noqa: E402
from dataplane.http.h2_server_codec import ServerCodec, ServerListener  # noqa: E402

FIELDS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":authority", b"router.internal:8080"),
    (b":path", b"/v1/chat/completions"),
    (b"content-type", b"application/json"),
    (b"content-length", b"0"),
    (b"user-agent", b"OpenAI/Python 1.51.0"),
    (b"accept", b"application/json"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"authorization", b"Bearer sk-0123456789abcdef"),
    (b"x-request-id", b"5b7c7f0e-8d1e-4e55-9a47-1f0c8e2b9a10"),
    (b"x-forwarded-for", b"10.1.2.3"),
]


def _frames(count: int, vary: bool = False) -> tuple[bytes, list[bytes]]:
    """The client's preface and ``count`` HEADERS frames; ``vary``: a new x-request-id each time
    (h2's client indexes it, so every block changes the dynamic table: no decode is cached)."""
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    preface = client.data_to_send()
    frames = []
    for _ in range(count):
        sid = client.get_next_available_stream_id()
        fields = FIELDS if not vary else [*FIELDS[:-2], (b"x-request-id", b"%036d" % sid), FIELDS[-1]]
        client.send_headers(sid, fields, end_stream=True)
        frames.append(client.data_to_send())
        del client.streams[sid]
    return preface, frames


def _old_loop(fields: list[tuple[bytes, bytes]]) -> None:
    """The pseudo-header loop ``http2._on_request`` ran before (h2 had validated already)."""
    method = path = b""
    authority = None
    has_host = False
    headers = []
    for name, value in fields:
        if name[0] == 58:
            if name == b":method":
                method = value
            elif name == b":path":
                path = value
            elif name == b":authority":
                authority = value
            continue
        if name == b"host":
            has_host = True
        elif name == b"content-length" and value.isdigit() and int(value) > 1 << 25:
            pass
        headers.append((name, value))
    if authority is not None and not has_host:
        headers.append((b"host", authority))
    del method, path


def _run_h2(preface: bytes, frames: list[bytes]) -> float:
    config = H2Configuration(
        client_side=False,
        header_encoding=None,
        validate_inbound_headers=True,
        normalize_inbound_headers=True,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
    )
    conn = H2Connection(config=config)
    conn.initiate_connection()
    conn.receive_data(preface)
    started = time.process_time()
    for frame in frames:
        for ev in conn.receive_data(frame):
            if isinstance(ev, RequestReceived):
                _old_loop(ev.headers)
                conn.streams.pop(ev.stream_id, None)  # answered: keep the connection small
    return (time.process_time() - started) / len(frames) * 1e6


class _Checker(ServerListener):
    """A ``ServerListener`` that validates each request and closes its stream."""

    codec: ServerCodec

    def on_request(self, sid: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        request_fields(headers)
        self.codec.send_headers(sid, b"\x89", True)  # :status 204 (static index 9)

    def on_data(self, sid: int, data: bytes, end_stream: bool) -> None: ...
    def on_trailers(self, sid: int, headers: list[tuple[bytes, bytes]]) -> None: ...
    def on_malformed_block(self, sid: int) -> None: ...
    def on_client_reset(self, sid: int) -> bool:
        return False

    def on_stream_error(self, sid: int) -> None: ...
    def on_window(self, sid: int) -> None: ...
    def on_peer_goaway(self, code: int) -> bool:
        return False


def _run_own(preface: bytes, frames: list[bytes]) -> float:
    checker = _Checker()
    codec = checker.codec = ServerCodec(
        checker,
        max_concurrent_streams=1000,
        initial_window=1 << 24,
        connection_window=1 << 24,
        max_frame_size=1 << 16,
        max_header_list_size=1 << 16,
    )
    codec.feed(preface)
    started = time.process_time()
    for frame in frames:
        codec.feed(frame)
        codec.take_output()
    return (time.process_time() - started) / len(frames) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    preface, frames = _frames(args.requests)
    _, varied = _frames(args.requests, vary=True)
    best = {"h2 validates": float("inf"), "own checks": float("inf"), "own, new ids": float("inf")}
    for _ in range(args.rounds):
        best["h2 validates"] = min(best["h2 validates"], _run_h2(preface, frames))
        best["own checks"] = min(best["own checks"], _run_own(preface, frames))
        best["own, new ids"] = min(best["own, new ids"], _run_own(preface, varied))
    base = best["h2 validates"]
    print(f"h2c request HEADERS ({len(FIELDS)} fields) decoded + validated, best of {args.rounds} rounds")
    print(f"{'case':<14} {'us/req':>8} {'vs h2':>7}")
    for name, cost in best.items():
        print(f"{name:<14} {cost:>8.1f} {cost / base:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
