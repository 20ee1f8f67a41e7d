"""Cost of per-stream request validation on the h2c hot path (``dataplane/http/h2_fields``).

Same run, interleaved rounds: N request HEADERS frames (a proxy-like header list, HPACK
dynamic table warm as on a long-lived connection) fed to

- ``h2 validates``: ``H2Connection`` with ``validate_inbound_headers=True`` plus the pseudo-header
  loop ``http2`` ran before (the previous code path: a malformed request is a GOAWAY);
- ``own checks``: ``LenientH2Connection`` with ``validate_inbound_headers=False`` plus
  ``request_fields`` (a malformed request is a stream error).

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

from dataplane.http.h2_fields import LenientH2Connection, request_fields  # noqa: E402

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


def _frames(count: int) -> tuple[bytes, list[bytes]]:
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    preface = client.data_to_send()
    frames = []
    for _ in range(count):
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, FIELDS, end_stream=True)
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


def _run(lenient: bool, preface: bytes, frames: list[bytes]) -> float:
    config = H2Configuration(
        client_side=False,
        header_encoding=None,
        validate_inbound_headers=not lenient,
        normalize_inbound_headers=True,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
    )
    conn = (LenientH2Connection if lenient else H2Connection)(config=config)
    conn.initiate_connection()
    conn.receive_data(preface)
    started = time.process_time()
    for frame in frames:
        for ev in conn.receive_data(frame):
            if isinstance(ev, RequestReceived):
                if lenient:
                    request_fields(ev.headers)
                else:
                    _old_loop(ev.headers)
                conn.streams.pop(ev.stream_id, None)  # answered: keep the connection small
    return (time.process_time() - started) / len(frames) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    preface, frames = _frames(args.requests)
    best = {"h2 validates": float("inf"), "own checks": float("inf")}
    for _ in range(args.rounds):
        best["h2 validates"] = min(best["h2 validates"], _run(False, preface, frames))
        best["own checks"] = min(best["own checks"], _run(True, preface, frames))
    base = best["h2 validates"]
    print(f"h2c request HEADERS ({len(FIELDS)} fields) decoded + validated, best of {args.rounds} rounds")
    print(f"{'case':<14} {'us/req':>8} {'vs h2':>7}")
    for name, cost in best.items():
        print(f"{name:<14} {cost:>8.1f} {cost / base:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
