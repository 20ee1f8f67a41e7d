"""The exact bytes the router forwards (SPEC §3.3 injection, §5 forwarding), seen by a recording worker."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import pytest

from tests.fakes.raw_http import MODEL, CaptureWorker, kept_alive, request
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def recorded(capture: CaptureWorker) -> Iterator[RouterProcess]:
    """A router in front of the recording worker; the contract lists n before temperature."""
    with RouterProcess(
        "--worker",
        capture.url,
        "--override-sampling-params",
        '{"n": 1.0, "temperature": 0.5, "top_p": {"min": 0.5, "max": 1}}',
    ) as r:
        yield r


def forwarded(router: RouterProcess, capture: CaptureWorker, path: str, body: bytes) -> bytes:
    """POST ``body``; the body the worker received (the answer must be the worker's 200)."""
    before = len(capture.requests)
    answer = request(router, "POST", path, body)
    assert answer.status == 200, answer.body
    assert len(capture.requests) == before + 1
    return capture.requests[-1][2]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"audit-model","prompt":"x","temperature":0.5,"n":1}',
        b'{ "model" : "audit-model" ,\n "prompt":"\\u00e9\xc3\xa9", "n":"1", "temperature":"0.5"  }\r\n',
        b'{"model":"audit-model","temperature":0.9,"temperature":0.5,"n":true,"top_p":0.75}',
        b'{"model":"audit-model","\\u0074emperature":0.5,"n":1.0,"extra":{"temperature":9}}',
    ],
)
def test_nothing_to_inject_is_forwarded_byte_for_byte(
    recorded: RouterProcess, capture: CaptureWorker, body: bytes
) -> None:
    """A body that sets every exact field (and no band default is due) reaches the worker unchanged."""
    assert forwarded(recorded, capture, "/v1/completions", body) == body


def test_injection_goes_before_the_final_brace_in_field_order(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """Absent fields are appended before the last '}' in SPEC §2 order; trailing bytes are kept."""
    body = b'{"model":"audit-model","prompt":"x"}  \n'
    assert forwarded(recorded, capture, "/v1/completions", body) == (
        b'{"model":"audit-model","prompt":"x","temperature":0.5,"n":1}  \n'
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{}", b'{"temperature":0.5,"n":1}'),
        (b" { \n } ", b' { \n "temperature":0.5,"n":1} '),
        (b'{"temperature":null}', b'{"temperature":null,"temperature":0.5,"n":1}'),
    ],
)
def test_empty_object_gets_no_comma(
    recorded: RouterProcess, capture: CaptureWorker, body: bytes, expected: bytes
) -> None:
    """An empty object gets the pairs without a leading comma; null counts as absent."""
    assert forwarded(recorded, capture, "/v1/chat/completions", body) == expected


def test_generate_creates_or_restates_sampling_params(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """/generate: sampling_params is created when absent or null, else re-stated last with the pairs."""
    created = forwarded(recorded, capture, "/generate", b'{"text":"x"}')
    assert created == b'{"text":"x","sampling_params":{"temperature":0.5,"n":1}}'
    nulled = forwarded(recorded, capture, "/generate", b'{"text":"x","sampling_params":null}')
    assert json.loads(nulled)["sampling_params"] == {"temperature": 0.5, "n": 1}
    restated = forwarded(
        recorded, capture, "/generate", b'{"sampling_params":{"max_new_tokens":3},"text":"x"}'
    )
    assert json.loads(restated) == {
        "sampling_params": {"max_new_tokens": 3, "temperature": 0.5, "n": 1},
        "text": "x",
    }


def test_large_body_is_spliced_exactly(recorded: RouterProcess, capture: CaptureWorker) -> None:
    """A body over 64 KiB gets the same splice: everything before and after the insertion kept."""
    prompt = "y" * 200_000
    body = json.dumps({"model": MODEL, "prompt": prompt}).encode()
    got = forwarded(recorded, capture, "/v1/completions", body)
    assert got == body[:-1] + b',"temperature":0.5,"n":1}'


def test_unjudged_path_and_query_are_forwarded_untouched(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """POST /v1/<other>?q keeps its path, query and bytes; a judged path keeps its query string."""
    body = b'{"model":"audit-model","input":"x","temperature":7}'
    assert forwarded(recorded, capture, "/v1/embeddings?a=1&b=%20", body) == body
    assert capture.requests[-1][0] == "/v1/embeddings?a=1&b=%20"
    forwarded(recorded, capture, "/v1/completions?trace=1", b'{"prompt":"x"}')
    assert capture.requests[-1][0] == "/v1/completions?trace=1"


def test_end_to_end_headers_are_forwarded_and_hop_by_hop_dropped(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """Authorization and custom headers reach the worker; Connection and what it names do not."""
    request(
        recorded,
        "POST",
        "/v1/completions",
        b'{"prompt":"x"}',
        headers="Authorization: Bearer sk-test\r\nX-Request-Id: abc\r\nX-Hop: 1\r\nConnection: X-Hop\r\nTE: trailers\r\n",
    )
    headers = capture.requests[-1][1]
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["x-request-id"] == "abc"
    assert "x-hop" not in headers
    assert "te" not in headers


def test_a_head_with_nothing_to_drop_reaches_the_worker_as_the_client_wrote_its_lines(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """The client's end-to-end lines cross byte for byte (case, spacing, order); Host,
    Content-Length and Connection are the router's own, the length that of the injected body."""
    sent = b'{"model":"audit-model","prompt":"x"}'
    request(recorded, "POST", "/v1/completions", sent, headers="X-Trace:  a b \r\nUser-Agent: t/1\r\n")
    head, body = capture.heads[-1], capture.requests[-1][2]
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/completions HTTP/1.1"
    assert lines[-3:] == [b"X-Trace:  a b ", b"User-Agent: t/1", b"Content-Type: application/json"]
    assert body != sent and json.loads(body)["temperature"] == 0.5  # injected
    own = {line.partition(b":")[0].lower(): line.partition(b":")[2].strip() for line in lines[1:-3]}
    assert own == {
        b"host": capture.url.removeprefix("http://").encode(),
        b"content-length": b"%d" % len(body),
    }


def h2c_posts(
    router: RouterProcess, path: str, body: bytes, fields: list[tuple[str, str]], times: int
) -> list[int]:
    """``times`` POSTs with the same header block, one after the other on one h2c prior-knowledge
    connection (its HPACK encoder indexes the fields: the blocks' bytes repeat from the second
    on); each answer's status."""
    return [int(dict(head)[b":status"]) for head in h2c_answers(router, path, body, fields, times)]


def h2c_answers(
    router: RouterProcess, path: str, body: bytes, fields: list[tuple[str, str]], times: int
) -> list[list[tuple[bytes, bytes]]]:
    """``h2c_posts``, each answer's header fields (pseudo-fields included) in order."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    heads: list[list[tuple[bytes, bytes]]] = []
    with socket.create_connection((router.host, router.port), timeout=10) as sock:
        sock.sendall(conn.data_to_send())
        for _ in range(times):
            sid = conn.get_next_available_stream_id()
            pseudo = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "r")]
            conn.send_headers(sid, pseudo + fields)
            conn.send_data(sid, body, end_stream=True)
            sock.sendall(conn.data_to_send())
            ended = False
            while not ended:
                data = sock.recv(65536)
                assert data, "connection closed early"
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        heads.append(list(event.headers))
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        ended = ended or event.stream_id == sid
                sock.sendall(conn.data_to_send())
    return heads


def test_an_h2c_clients_fields_reach_the_worker_in_order_on_every_request_of_a_connection(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """An h2c client's regular fields reach an HTTP/1.1 worker as header lines in its order, on
    the first request and on those whose header block repeats; Host and Content-Length are the
    router's own (:authority does not cross), the length that of the injected body."""
    fields = [("x-trace", "a b"), ("user-agent", "t/1"), ("content-type", "application/json")]
    before = len(capture.heads)
    sent = b'{"model":"audit-model","prompt":"x"}'
    assert h2c_posts(recorded, "/v1/completions", sent, fields, 3) == [200, 200, 200]
    assert len(capture.heads) == before + 3
    for head, (_, _, body) in zip(capture.heads[before:], capture.requests[before:], strict=True):
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /v1/completions HTTP/1.1"
        assert lines[-3:] == [b"x-trace: a b", b"user-agent: t/1", b"content-type: application/json"]
        own = {line.partition(b":")[0].lower(): line.partition(b":")[2].strip() for line in lines[1:-3]}
        assert own == {
            b"host": capture.url.removeprefix("http://").encode(),
            b"content-length": b"%d" % len(body),
        }
        assert json.loads(body)["temperature"] == 0.5  # injected


def test_an_h2c_clients_te_and_proxy_fields_never_reach_the_worker_and_a_coded_body_is_refused(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """TE and Proxy-* fields from an h2c client are dropped on every request of a connection, the
    others kept in order; a Content-Encoding on a judged route is refused before any worker."""
    fields = [("te", "trailers"), ("x-a", "1"), ("proxy-authorization", "Basic eA=="), ("x-b", "2")]
    before = len(capture.heads)
    assert h2c_posts(recorded, "/v1/completions", b'{"prompt":"x"}', fields, 2) == [200, 200]
    for head in capture.heads[before:]:
        names = [line.partition(b":")[0] for line in head.split(b"\r\n")[1:]]
        assert names[-2:] == [b"x-a", b"x-b"]
        assert b"te" not in names and b"proxy-authorization" not in names
    coded = [("content-encoding", "gzip")]
    assert h2c_posts(recorded, "/v1/completions", b'{"prompt":"x"}', coded, 2) == [400, 400]
    assert len(capture.heads) == before + 2


@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_workers_answer_headers_cross_but_its_hop_by_hop_ones_do_not(
    recorded: RouterProcess, capture: CaptureWorker, keep_alive: bool
) -> None:
    """The worker's end-to-end answer headers reach the client as it sent them, its hop-by-hop
    ones (Connection, Keep-Alive, RFC 9110 §7.6.1) never, with the router's revision header and
    framing; on a connection the client keeps open (two answers in a row) and on a closing one."""
    body = b'{"model":"audit-model","prompt":"x"}'
    post = (
        b"POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n%s" % (len(body), b"" if keep_alive else b"Connection: close\r\n", body)
    )
    cases = {
        b"Server: capture/1\r\nX-Trace: a  b\r\n": {"server": "capture/1", "x-trace": "a  b"},
        b"Server: capture/1\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\n": {"server": "capture/1"},
    }
    try:
        for lines, expected in cases.items():
            capture.answer_headers = lines
            answers = kept_alive(recorded, [post, post] if keep_alive else [post])
            for answer in answers:
                assert answer.status == 200 and answer.body == b'{"ok":true}'
                headers = dict(answer.headers)
                assert headers.pop("x-contract-revision") == "0"
                assert headers.pop("content-length") == "11"
                assert headers.pop("content-type") == "application/json"
                if not keep_alive:
                    assert headers.pop("connection") == "close"
                assert headers == expected
    finally:
        capture.answer_headers = b""


def test_an_h2c_client_gets_the_workers_answer_fields_but_its_hop_by_hop_ones(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """An HTTP/1.1 worker's answer to an h2c client: its end-to-end header lines become fields
    in order (names lower-cased, values as llhttp reads them), its hop-by-hop ones and its
    Content-Length framing do not cross, the router's revision header follows; on every answer
    of one connection."""
    cases = {
        b"Server: capture/1\r\nX-Trace:  a  b \r\nx-empty:\r\n": [
            (b"server", b"capture/1"),
            (b"x-trace", b"a  b"),
            (b"x-empty", b""),
        ],
        b"Server: capture/1\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\n": [
            (b"server", b"capture/1")
        ],
    }
    try:
        for lines, expected in cases.items():
            capture.answer_headers = lines
            for head in h2c_answers(recorded, "/v1/completions", b'{"prompt":"x"}', [], 3):
                fields = [(n, v) for n, v in head if n not in (b"content-type", b"content-length")]
                assert fields == [(b":status", b"200"), *expected, (b"x-contract-revision", b"0")]
                assert dict(head)[b"content-length"] == b"11"
    finally:
        capture.answer_headers = b""


def test_a_fragment_cannot_escape_the_contract(recorded: RouterProcess, capture: CaptureWorker) -> None:
    """``/v1/chat/completions#x`` is judged as chat (uvicorn's httptools routes it there): a
    violation is refused, an accepted body is injected and forwarded without the fragment."""
    for target in ("/v1/chat/completions#x", "/generate#?a=1", "/v1/x/..%2Fcompletions#y"):
        refused = request(
            recorded, "POST", target, b'{"temperature":0.9,"sampling_params":{"temperature":0.9}}'
        )
        assert refused.status == 400, target
        assert refused.error_code == "sampling_contract_violation"
    assert forwarded(recorded, capture, "/v1/chat/completions#x", b"{}") == b'{"temperature":0.5,"n":1}'
    assert capture.requests[-1][0] == "/v1/chat/completions"


def test_absolute_form_targets_are_judged_and_forwarded_in_origin_form(
    recorded: RouterProcess, capture: CaptureWorker
) -> None:
    """``POST http://host/v1/chat/completions`` (RFC 9112 §3.2.2) is judged as chat and reaches the
    worker as ``/v1/chat/completions``; ``GET http://host/health`` is answered."""
    target = f"http://{recorded.host}:{recorded.port}/v1/chat/completions"
    refused = request(recorded, "POST", target, b'{"temperature":0.9}')
    assert (refused.status, refused.error_code) == (400, "sampling_contract_violation")
    assert forwarded(recorded, capture, target + "?q=1", b"{}") == b'{"temperature":0.5,"n":1}'
    assert capture.requests[-1][0] == "/v1/chat/completions?q=1"
    assert request(recorded, "GET", f"http://{recorded.host}/health").status == 200
