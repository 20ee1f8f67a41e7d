"""The contract on every route the engine serves (SPEC §5.1), through a real router to real
engine-sims over HTTP/1.1 and h2c, driven by the official openai and anthropic clients."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.fakes.chat_client import MODEL, engine_read, error_of, post
from tests.fakes.engine_sim import EngineSim
from tests.fakes.h2c import h2c_requests
from tests.fakes.router import RouterProcess

CONTRACT = '{"temperature": 1, "top_p": 0.95}'
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module", params=["http1", "h2c"])
def router(request: pytest.FixtureRequest) -> Iterator[RouterProcess]:
    """A router judging by CONTRACT in front of one engine-sim speaking ``request.param``; the
    engine-sim serves Ollama chat on a moved path, which the router maps with --route."""
    h2 = ["--http2"] if request.param == "h2c" else []
    env = {"SGLANG_OLLAMA_CHAT_ROUTE": "/ollama/chat"}
    with (
        EngineSim("--model", MODEL, *h2, env=env) as sim,
        RouterProcess(
            "--worker",
            sim.url,
            "--override-sampling-params",
            CONTRACT,
            "--route",
            "/ollama/chat=ollama",
            "--unjudged-route",
            "/get_load",
        ) as r,
    ):
        yield r


def _client(router: RouterProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=10)


def test_openai_responses_create_gets_the_contract_injected(router: RouterProcess) -> None:
    """responses.create without sampling fields: the engine samples with the contracted values."""
    raw = _client(router).responses.with_raw_response.create(model=MODEL, input="hi", max_output_tokens=3)
    assert raw.parse().output_text
    read = json.loads(raw.headers["x-sim-sampling-params"])
    assert (read["temperature"], read["top_p"]) == (1.0, 0.95)


def test_openai_responses_create_with_another_temperature_is_refused(router: RouterProcess) -> None:
    """responses.create(temperature=0.2): 400 sampling_contract_violation before any engine sees it."""
    with pytest.raises(openai.BadRequestError) as caught:
        _client(router).responses.create(model=MODEL, input="hi", temperature=0.2)
    assert caught.value.status_code == 400
    assert caught.value.body["code"] == "sampling_contract_violation"  # type: ignore[index]
    assert caught.value.body["param"] == "temperature"  # type: ignore[index]


def test_anthropic_messages_create_gets_the_contract_injected(router: RouterProcess) -> None:
    """anthropic's messages.create: the engine reads the contracted temperature and top_p."""
    client = anthropic.Anthropic(base_url=router.url, api_key="unused", max_retries=0, timeout=10)
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=3, messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.parse().content
    assert json.loads(raw.headers["x-sim-sampling-params"]) == {
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": None,
    }


def test_anthropic_messages_with_another_temperature_is_refused(router: RouterProcess) -> None:
    """A temperature sent on /v1/messages (extra_body, as 2.x clients do) that breaks the contract: 400."""
    client = anthropic.Anthropic(base_url=router.url, api_key="unused", max_retries=0, timeout=10)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL,
            max_tokens=3,
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_body={"temperature": 0.2},
        )
    assert caught.value.status_code == 400
    assert caught.value.response.headers["x-router-error-code"] == "sampling_contract_violation"


def test_transcription_is_refused_when_the_contract_needs_a_field_it_cannot_carry(
    router: RouterProcess,
) -> None:
    """audio.transcriptions.create under a contract with an exact top_p: the form carries only
    temperature, so the request is refused, naming the field and the route."""
    with pytest.raises(openai.BadRequestError) as caught:
        _client(router).audio.transcriptions.create(model=MODEL, file=("a.wav", b"RIFF\x00\x01"))
    assert caught.value.body["param"] == "top_p"  # type: ignore[index]
    assert "cannot be set on /v1/audio/transcriptions" in caught.value.body["message"]  # type: ignore[index]


def test_openai_transcription_gets_the_contract_injected() -> None:
    """audio.transcriptions.create under a temperature contract: the form field is injected and
    read by the engine; another temperature is refused."""
    with (
        EngineSim("--model", MODEL) as sim,
        RouterProcess("--worker", sim.url, "--override-sampling-params", '{"temperature": 0.4}') as router,
    ):
        client = _client(router)
        raw = client.audio.transcriptions.with_raw_response.create(
            model=MODEL, file=("a.wav", b"RIFF\x00\x01")
        )
        assert raw.parse().text and json.loads(raw.headers["x-sim-sampling-params"]) == {"temperature": 0.4}
        with pytest.raises(openai.BadRequestError):
            client.audio.transcriptions.create(model=MODEL, file=("a.wav", b"RIFF"), temperature=0.9)


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/invocations", {"model": MODEL, "messages": MESSAGES, "max_tokens": 2}, None),
        ("/api/generate", {"model": MODEL, "prompt": "hi", "stream": False}, None),
        ("/ollama/chat", {"model": MODEL, "messages": MESSAGES, "stream": False}, None),
        ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, None),
        ("/vertex_generate", {"instances": [{"text": "hi"}], "parameters": {"sampling_params": {}}}, None),
    ],
)
def test_every_judged_route_gets_the_contract_injected(
    router: RouterProcess, path: str, body: dict[str, object], where: int | None
) -> None:
    """Chat for SageMaker, Ollama (its generate route, and its chat route on the path the engine
    moved it to), /generate and Vertex: injected where each reads."""
    status, headers, reply = post(router.url, path, body)
    assert status == 200, reply
    read = engine_read(headers)
    read = read[where] if where is not None else read
    assert (read["temperature"], read["top_p"]) == (1.0, 0.95)
    assert headers["x-contract-revision"] == "0"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/chat", {"model": MODEL, "messages": MESSAGES, "options": {"temperature": 0.2}}),
        ("/ollama/chat", {"model": MODEL, "messages": MESSAGES, "options": {"top_p": "0.95"}}),
        ("/generate", {"text": "hi", "sampling_params": {"temperature": 0.2}}),
        (
            "/vertex_generate",
            {"instances": [{"text": "hi"}], "parameters": {"sampling_params": {"top_p": 0.5}}},
        ),
        ("/invocations", {"model": MODEL, "messages": MESSAGES, "temperature": "0.2"}),
    ],
)
def test_every_judged_route_refuses_a_conflicting_value(
    router: RouterProcess, path: str, body: dict[str, object]
) -> None:
    """A conflicting (or unreadable) value on any judged route: 400 before admission."""
    status, code, _ = error_of(*post(router.url, path, body))
    assert (status, code) == (400, "sampling_contract_violation")


@pytest.mark.parametrize(
    "path", ["/v1/anything", "/V1/chat/completions", "/api/chat2", "/flush_cache", "/api/show"]
)
def test_unknown_paths_are_refused(router: RouterProcess, path: str) -> None:
    """Default-deny: a path outside the route table never reaches a worker (404 route_not_found)."""
    status, code, _ = error_of(*post(router.url, path, {"model": MODEL, "temperature": 0.2}))
    assert (status, code) == (404, "route_not_found")


def test_unjudged_routes_reach_the_worker_untouched(router: RouterProcess) -> None:
    """/v1/embeddings and an --unjudged-route path are forwarded without judging."""
    status, headers, _ = post(router.url, "/v1/embeddings", {"model": MODEL, "input": "hi", "temperature": 9})
    assert status == 200 and "x-sim-sampling-params" not in headers
    status, _, body = router.get("/get_load")  # the operator's --unjudged-route, a GET
    assert status == 200 and json.loads(body)  # engine-sim's own load answer


@pytest.mark.parametrize("header", ["content-encoding", "x-body-compressed"])
def test_a_compressed_body_is_refused_on_judged_routes(router: RouterProcess, header: str) -> None:
    """A body the engine would decompress first cannot be judged: 400 bad_request naming the header."""
    status, code, err = error_of(
        *post(router.url, "/v1/chat/completions", {"model": MODEL, "messages": MESSAGES}, {header: "zstd"})
    )
    assert (status, code) == (400, "bad_request") and header in err["message"]


def test_get_contract_lists_the_route_table(router: RouterProcess) -> None:
    """GET /contract lists every route with its dialect, the operator's mappings included."""
    status, _, body = router.get("/contract")
    routes = {entry["path"]: entry for entry in json.loads(body)["routes"]}
    assert status == 200
    assert routes["/ollama/chat"] == {
        "path": "/ollama/chat",
        "methods": ["POST"],
        "dialect": "ollama",
        "judged": True,
        "origin": "--route",
    }
    assert routes["/get_load"]["judged"] is False and routes["/v1/responses"]["dialect"] == "responses"


def test_dialects_over_an_h2c_front_door(router: RouterProcess) -> None:
    """Clients speaking h2c to the router get the same judging on the new routes."""
    injected, refused, unknown = h2c_requests(
        router,
        [
            ("POST", "/v1/responses", json.dumps({"model": MODEL, "input": "hi"}).encode()),
            (
                "POST",
                "/v1/messages",
                json.dumps({"model": MODEL, "max_tokens": 2, "messages": MESSAGES, "top_p": 0.5}).encode(),
            ),
            ("POST", "/v1/anything", b"{}"),
        ],
    )
    assert injected[0][":status"] == "200"
    assert json.loads(injected[0]["x-sim-sampling-params"])["temperature"] == 1.0
    assert (refused[0][":status"], refused[0]["x-router-error-code"]) == (
        "400",
        "sampling_contract_violation",
    )
    assert (unknown[0][":status"], unknown[0]["x-router-error-code"]) == ("404", "route_not_found")
