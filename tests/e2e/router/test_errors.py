"""Every SPEC §5 error this router can produce in standalone mode, through a real process."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL, chat, error_of, post, read_json_answer, send_raw_chat
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def two_models() -> Iterator[RouterProcess]:
    """A router in front of two sims serving different models."""
    with (
        EngineSim("--model", MODEL) as a,
        EngineSim("--model", "other-model") as b,
        RouterProcess("--worker", a.url, "--worker", b.url, "--max-body-bytes", "4096") as r,
    ):
        yield r


def _code(url: str, path: str, body: bytes | dict[str, object]) -> tuple[int, str]:
    status, headers, raw = post(url, path, body)
    return error_of(status, headers, raw)[:2]


def test_bad_request_cases(two_models: RouterProcess) -> None:
    """Malformed JSON, a non-object, a repeated routing key and a missing model are 400 bad_request."""
    url = two_models.url
    assert _code(url, "/v1/chat/completions", b'{"model": ') == (400, "bad_request")
    assert _code(url, "/v1/chat/completions", b"[1, 2]") == (400, "bad_request")
    assert _code(url, "/v1/chat/completions", b'{"model":"sim-model","model":"sim-model"}') == (
        400,
        "bad_request",
    )
    assert _code(url, "/v1/chat/completions", {"messages": []}) == (400, "bad_request")
    assert _code(url, "/generate", {"model": MODEL, "sampling_params": 3}) == (400, "bad_request")


def test_model_routing_and_not_found(two_models: RouterProcess) -> None:
    """Each model is served by its worker; an unknown model is 404 model_not_found."""
    for model in (MODEL, "other-model"):
        status, _, body = post(two_models.url, "/v1/chat/completions", chat(model))
        assert status == 200 and json.loads(body)["model"] == model
    assert _code(two_models.url, "/v1/chat/completions", chat("nope")) == (404, "model_not_found")
    status, _, body = two_models.get("/v1/models")
    assert sorted(m["id"] for m in json.loads(body)["data"]) == sorted([MODEL, "other-model"])


def test_payload_too_large(two_models: RouterProcess) -> None:
    """A body over --max-body-bytes is refused with 413 payload_too_large."""
    big = chat(padding="x" * 5000)
    assert _code(two_models.url, "/v1/chat/completions", big) == (413, "payload_too_large")


def test_unknown_path_and_wrong_method(two_models: RouterProcess) -> None:
    """Unknown paths are 404 not_found and a GET on a judged endpoint is 405, both in the envelope."""
    assert _code(two_models.url, "/nope", b"{}") == (404, "route_not_found")
    status, headers, body = two_models.get("/v1/chat/completions")
    assert error_of(status, headers, body)[:2] == (405, "method_not_allowed")


def test_no_healthy_workers() -> None:
    """A router without workers answers 503 no_healthy_workers and is not ready."""
    with RouterProcess() as router:
        assert _code(router.url, "/v1/chat/completions", chat()) == (503, "no_healthy_workers")
        status, headers, body = router.get("/readiness")
        assert error_of(status, headers, body)[:2] == (503, "no_healthy_workers")
        assert router.get("/health")[0] == 200


def test_upstream_unreachable_after_the_worker_died() -> None:
    """A registered worker that no longer accepts connections gives 502 upstream_unreachable."""
    sim = EngineSim("--model", MODEL).start()
    with RouterProcess("--worker", sim.url) as router:
        assert post(router.url, "/v1/chat/completions", chat())[0] == 200
        sim.stop()
        status, headers, body = post(router.url, "/v1/chat/completions", chat())
        _, code, err = error_of(status, headers, body)
        assert (status, code) == (502, "upstream_unreachable")
        assert str(sim.port) not in err["message"]  # server errors never reveal worker addresses


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[EngineSim]:
    """A sim decoding 20 tokens per second per request."""
    with EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as s:
        yield s


def test_upstream_timeout(slow_sim: EngineSim) -> None:
    """Past --request-timeout-s: 504 upstream_timeout, or a final SSE error event mid-stream."""
    with RouterProcess("--worker", slow_sim.url, "--request-timeout-s", "0.3") as router:
        body = chat(max_tokens=40)
        assert _code(router.url, "/v1/chat/completions", body) == (504, "upstream_timeout")
        status, _, raw = post(router.url, "/v1/chat/completions", chat(max_tokens=40, stream=True))
        assert status == 200
        events = raw.decode().strip().split("\n\n")
        assert events[-1].startswith("event: error\ndata: ")
        assert json.loads(events[-1].split("data: ", 1)[1])["error"]["code"] == "upstream_timeout"


def test_worker_killed_mid_stream_ends_with_an_sse_error() -> None:
    """A worker dying mid-stream ends the stream with a final upstream_body_incomplete event."""
    sim = EngineSim("--model", MODEL, "--decode-tokens-per-s", "20").start()
    try:
        with RouterProcess("--worker", sim.url) as router:
            conn = http.client.HTTPConnection(router.host, router.port, timeout=10)
            conn.request("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=200, stream=True)))
            resp = conn.getresponse()
            assert resp.status == 200
            first = resp.readline()
            assert first.startswith(b"data: ")
            sim.stop()
            rest = resp.read().decode()
            assert "event: error" in rest
            last = rest.strip().split("\n\n")[-1]
            assert json.loads(last.split("data: ", 1)[1])["error"]["code"] == "upstream_body_incomplete"
            conn.close()
    finally:
        sim.stop()


def test_worker_killed_before_answering_is_502() -> None:
    """A worker dying before its (non-streaming) answer gives 502 upstream_body_incomplete."""
    sim = EngineSim("--model", MODEL, "--decode-tokens-per-s", "20").start()
    try:
        with RouterProcess("--worker", sim.url) as router:
            sock = send_raw_chat(router.host, router.port, chat(max_tokens=200))
            time.sleep(0.3)
            sim.stop()
            head, body = read_json_answer(sock)
            assert head.startswith(b"HTTP/1.1 502")
            assert b"x-router-error-code: upstream_body_incomplete" in head
            assert json.loads(body)["error"]["code"] == "upstream_body_incomplete"
    finally:
        sim.stop()


def test_other_v1_paths_are_forwarded_unjudged(two_models: RouterProcess) -> None:
    """POST /v1/<other> goes to the model's worker unjudged: the engine's own answer comes back."""
    status, headers, body = post(two_models.url, "/v1/embeddings", {"model": MODEL, "input": "hi"})
    assert "x-contract-revision" not in headers
    assert headers.get("x-router-error-code") is None  # the worker answered, not the router
    assert status == 200 and json.loads(body)["object"] == "list"  # engine-sim's embeddings answer
    assert "x-sim-sampling-params" not in headers  # an embedding samples nothing
