"""The engine's route table is read from the 0.5.23 wheel's http_server.py (SPEC §5.1)."""

from __future__ import annotations

import pytest

from tests.fakes import sglang_engine as engine

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)

ALL = engine.FIELDS
OLLAMA = ("temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty")


def _by_route() -> dict[tuple[str, str | None], engine.EngineRoute]:
    return {(r.method, r.path): r for r in engine.engine_routes()}


def test_sampling_routes_are_exactly_those_of_spec_5_1() -> None:
    """POST/PUT routes with a §2 field: SPEC §5.1's table, each with the fields it can carry."""
    found = {(r.method, r.path): r.sampling_fields for r in engine.sampling_routes()}
    assert found == {
        ("POST", "/v1/chat/completions"): ALL,
        ("POST", "/invocations"): ALL,
        ("POST", "/v1/completions"): ALL,
        ("POST", "/generate"): ALL,
        ("PUT", "/generate"): ALL,
        ("POST", "/v1/responses"): tuple(f for f in ALL if f != "n"),
        ("POST", "/v1/messages"): ("temperature", "top_p", "top_k"),
        ("POST", "/api/chat"): OLLAMA,
        ("POST", "/api/generate"): OLLAMA,
        ("POST", "/vertex_generate"): ALL,
        ("POST", "/v1/audio/transcriptions"): ("temperature",),
    }


def test_moved_paths_name_their_environment_variable() -> None:
    """Ollama's and Vertex's paths are defaults of environment variables (SPEC §5.1)."""
    routes = _by_route()
    assert routes[("POST", "/api/chat")].path_env == "SGLANG_OLLAMA_CHAT_ROUTE"
    assert routes[("POST", "/api/generate")].path_env == "SGLANG_OLLAMA_GENERATE_ROUTE"
    assert routes[("POST", "/vertex_generate")].path_env == "AIP_PREDICT_ROUTE"
    assert routes[("POST", "/v1/chat/completions")].path_env is None


def test_body_models_and_form_fields_are_the_handlers_own() -> None:
    """Each route names its handler's body class, or its Form fields for multipart routes."""
    routes = _by_route()
    assert routes[("POST", "/v1/chat/completions")].body_model == "ChatCompletionRequest"
    assert routes[("PUT", "/generate")].body_model == "GenerateReqInput"
    assert routes[("POST", "/vertex_generate")].body_model == "VertexGenerateReqInput"
    transcription = routes[("POST", "/v1/audio/transcriptions")]
    assert transcription.body_model is None
    assert (
        "temperature" in transcription.form_fields
        and "timestamp_granularities[]" in transcription.form_fields
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/tokenize"),
        ("POST", "/v1/detokenize"),
        ("POST", "/encode"),
        ("PUT", "/classify"),
        ("POST", "/v1/rerank"),
        ("POST", "/v1/messages/count_tokens"),
        ("POST", "/v1/responses/{response_id}/cancel"),
        ("GET", "/v1/models"),
        ("GET", "/v1/loads"),
    ],
)
def test_non_sampling_routes_carry_no_field(method: str, path: str) -> None:
    """Embedding, tokenizer and bookkeeping routes are served but sample nothing."""
    route = _by_route()[(method, path)]
    assert not route.carries_sampling


def test_scoring_routes_declare_temperature_that_does_not_sample() -> None:
    """/v1/score, /v1/decisions and /v1/systemone declare temperature, which no token sampling reads."""
    routes = _by_route()
    for path, model in (
        ("/v1/score", "ScoringRequest"),
        ("/v1/decisions", "DecisionRequest"),
        ("/v1/systemone", "SystemOneRequest"),
    ):
        route = routes[("POST", path)]
        assert route.body_model == model and route.declared == ("temperature",)
        assert not route.carries_sampling and model in engine.NOT_SAMPLING
