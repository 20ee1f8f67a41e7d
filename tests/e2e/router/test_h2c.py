"""h2c prior knowledge on the router's one port (SPEC §5): the same judgement as HTTP/1.1."""

from __future__ import annotations

import json
import socket

import h2.config
import h2.connection
import h2.events
import httpx2

from tests.fakes.raw_http import MODEL, request
from tests.fakes.router import RouterProcess

CHAT = "/v1/chat/completions"


def h2c_exchange(
    r: RouterProcess,
    path: str,
    frames: list[bytes],
    trailers: list[tuple[str, str]] | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> tuple[dict[str, str], bytes]:
    """One POST on a fresh h2c connection, its body sent as ``frames`` (no content-length)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with socket.create_connection((r.host, r.port), timeout=10) as sock:
        sock.sendall(conn.data_to_send())
        # Take the server's SETTINGS before sending: its windows, not the 64 KiB default.
        settled = False
        while not settled:
            events = conn.receive_data(sock.recv(65536))
            settled = any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)
        sock.sendall(conn.data_to_send())
        sid = conn.get_next_available_stream_id()
        fields = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "r")]
        fields += extra or []
        conn.send_headers(sid, fields)  # no frames: the stream stays open (a refusal at the head)
        for i, frame in enumerate(frames):
            conn.send_data(sid, frame, end_stream=i == len(frames) - 1 and not trailers)
        if trailers:
            conn.send_headers(sid, trailers, end_stream=True)
        sock.sendall(conn.data_to_send())
        headers: dict[str, str] = {}
        body = bytearray()
        while True:
            data = sock.recv(65536)
            assert data, "connection closed early"
            ended = False
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    headers = {k.decode(): v.decode() for k, v in event.headers}
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    ended = True
            sock.sendall(conn.data_to_send())
            if ended:
                return headers, bytes(body)


def test_body_in_several_frames_with_trailers_is_judged(router: RouterProcess) -> None:
    """A body split over DATA frames (no content-length, trailers after) is injected as on HTTP/1.1."""
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    ).encode()
    headers, answer = h2c_exchange(router, CHAT, [body[:7], body[7:20], body[20:]], [("x-t", "1")])
    assert headers[":status"] == "200"
    assert json.loads(headers["x-sim-sampling-params"])["temperature"] == 0.5
    assert headers["x-contract-revision"] == "0"
    assert json.loads(answer)["object"] == "chat.completion"


def test_violation_over_h2c_has_the_envelope(router: RouterProcess) -> None:
    """A violating body over h2c gets the same 400 envelope and header as over HTTP/1.1."""
    body = json.dumps({"model": MODEL, "messages": [], "top_k": "0x10"}).encode()
    headers, answer = h2c_exchange(router, CHAT, [body])
    assert headers[":status"] == "400"
    assert headers["x-router-error-code"] == "sampling_contract_violation"
    assert json.loads(answer) == {
        "error": {
            "type": "invalid_request_error",
            "code": "sampling_contract_violation",
            "param": "top_k",
            "message": "top_k violates this deployment's sampling contract: "
            "must be a number between 1 and 50, got a non-numeric value",
        }
    }


def test_oversized_h2c_body_is_413(router: RouterProcess) -> None:
    """A content-length past --max-body-bytes (default 32 MiB) is refused with 413 payload_too_large."""
    too_long = [("content-length", str(32 * 1024 * 1024 + 1))]
    headers, answer = h2c_exchange(router, CHAT, [], extra=too_long)
    assert headers[":status"] == "413"
    assert json.loads(answer)["error"]["code"] == "payload_too_large"


def test_httpx_http2_only_client_and_http1_share_the_port(router: RouterProcess) -> None:
    """An httpx client with http1=False, http2=True and a plain HTTP/1.1 client use one port."""
    with httpx2.Client(http1=False, http2=True, base_url=router.url, timeout=10) as client:
        got = client.post(
            "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1, "temperature": "0.5"}
        )
        assert got.http_version == "HTTP/2"
        assert got.status_code == 200
        assert client.get("/v1/models").json()["data"][0]["id"] == MODEL
    assert request(router, "GET", "/health").status == 200
