"""The router as clients use it: the official openai client, raw HTTP/1.1 and an h2c client."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import openai
import pytest

from tests.fakes.chat_client import MODEL, chat, engine_read
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def router(sims: tuple[EngineSim, EngineSim]) -> Iterator[RouterProcess]:
    a, b = sims
    with RouterProcess(
        "--worker", a.url, "--worker", b.url, "--override-sampling-params", '{"temperature": 0.25}'
    ) as r:
        yield r


@pytest.fixture
def client(router: RouterProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=10)


def test_openai_chat(client: openai.OpenAI) -> None:
    """A chat completion through the router; the engine read the injected temperature."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert json.loads(raw.headers["x-sim-sampling-params"])["temperature"] == 0.25
    assert raw.headers["x-contract-revision"] == "0"


def test_openai_completions(client: openai.OpenAI) -> None:
    """A legacy completion through the router."""
    completion = client.completions.create(model=MODEL, prompt="hi", max_tokens=3)
    assert completion.choices[0].text


def test_openai_streaming(client: openai.OpenAI) -> None:
    """A streamed chat arrives as chunks and ends normally."""
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
    )
    chunks = list(stream)
    assert len(chunks) >= 5
    assert chunks[-1].choices[0].finish_reason == "length"


def test_openai_sees_contract_violation_as_bad_request(client: openai.OpenAI) -> None:
    """The openai client raises BadRequestError carrying the envelope's code and param."""
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=1.0
        )
    assert info.value.code == "sampling_contract_violation"
    assert info.value.param == "temperature"


def test_openai_lists_models(client: openai.OpenAI) -> None:
    """GET /v1/models lists the served model once."""
    assert [m.id for m in client.models.list()] == [MODEL]


def test_requests_are_spread_over_both_workers(
    router: RouterProcess, sims: tuple[EngineSim, EngineSim]
) -> None:
    """Sequential requests are balanced over both workers."""
    for _ in range(6):
        assert router.get("/health")[0] == 200
        _http1_exchange(router, [_request(chat())])
    metrics = router.metrics()
    counts = [
        metrics.get(
            f'fleetplane_upstream_requests_total{{outcome="ok",protocol="http1",worker="{s.url}"}}', 0
        )
        for s in sims
    ]
    assert all(c >= 2 for c in counts), counts


def _request(body: dict[str, object], chunked: bool = False) -> bytes:
    payload = json.dumps(body).encode()
    if chunked:
        half = len(payload) // 2
        framed = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
            half,
            payload[:half],
            len(payload) - half,
            payload[half:],
        )
        return b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ntransfer-encoding: chunked\r\n\r\n" + framed
    return b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-length: %d\r\n\r\n%s" % (
        len(payload),
        payload,
    )


def _http1_exchange(router: RouterProcess, requests: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Send all requests at once on one connection (pipelined); read the same number of answers."""
    with socket.create_connection((router.host, router.port), timeout=10) as sock:
        sock.sendall(b"".join(requests))
        buf = b""
        answers: list[tuple[bytes, bytes]] = []
        while len(answers) < len(requests):
            while b"\r\n\r\n" not in buf:
                buf += sock.recv(65536)
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(buf) < length:
                buf += sock.recv(65536)
            answers.append((head, buf[:length]))
            buf = buf[length:]
        return answers


def test_raw_http1_keep_alive_pipelining_and_chunked_bodies(router: RouterProcess) -> None:
    """Pipelined requests on one keep-alive connection (one chunked) are answered in order."""
    answers = _http1_exchange(
        router,
        [_request(chat(max_tokens=1)), _request(chat(max_tokens=2), chunked=True), _request(chat(top_p=2))],
    )
    assert [a[0].split(b"\r\n", 1)[0] for a in answers] == [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 400 Bad Request",
    ]
    assert json.loads(answers[0][1])["usage"]["completion_tokens"] == 1
    assert json.loads(answers[1][1])["usage"]["completion_tokens"] == 2


def _h2c(router: RouterProcess, bodies: list[dict[str, object]]) -> list[tuple[dict[bytes, bytes], bytes]]:
    """Send every body as its own stream on one h2c (prior knowledge) connection."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with socket.create_connection((router.host, router.port), timeout=10) as sock:
        streams: dict[int, tuple[dict[bytes, bytes], bytearray]] = {}
        for body in bodies:
            sid = conn.get_next_available_stream_id()
            payload = json.dumps(body).encode()
            conn.send_headers(
                sid,
                [
                    (":method", "POST"),
                    (":path", "/v1/chat/completions"),
                    (":scheme", "http"),
                    (":authority", "router"),
                    ("content-type", "application/json"),
                    ("content-length", str(len(payload))),
                ],
            )
            conn.send_data(sid, payload, end_stream=True)
            streams[sid] = ({}, bytearray())
        sock.sendall(conn.data_to_send())
        done: set[int] = set()
        while len(done) < len(streams):
            data = sock.recv(65536)
            assert data, "connection closed early"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    streams[event.stream_id][0].update(dict(event.headers))
                elif isinstance(event, h2.events.DataReceived):
                    streams[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    done.add(event.stream_id)
            sock.sendall(conn.data_to_send())
        return [(headers, bytes(body)) for headers, body in streams.values()]


def test_h2c_client_concurrent_streams(router: RouterProcess) -> None:
    """An h2c client gets judged answers on concurrent streams of one connection (SSE included)."""
    answers = _h2c(router, [chat(), chat(temperature=2), chat(stream=True, max_tokens=3)])
    (ok_headers, ok_body), (bad_headers, bad_body), (sse_headers, sse_body) = answers
    assert ok_headers[b":status"] == b"200"
    assert engine_read({k.decode(): v.decode() for k, v in ok_headers.items()})["temperature"] == 0.25
    assert json.loads(ok_body)["object"] == "chat.completion"
    assert bad_headers[b":status"] == b"400"
    assert bad_headers[b"x-router-error-code"] == b"sampling_contract_violation"
    assert json.loads(bad_body)["error"]["param"] == "temperature"
    assert sse_headers[b":status"] == b"200"
    assert sse_body.endswith(b"data: [DONE]\n\n")
