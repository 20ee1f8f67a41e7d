"""The route table (SPEC §5.1): default-deny, the engine's routes, and the operator's flags."""

from __future__ import annotations

import pytest

from dataplane.router.contract.dialects import CHAT, GENERATE, MESSAGES, OLLAMA, TRANSCRIPTION, VERTEX
from dataplane.router.contract.routes import RouteError, build_route_table

JUDGED = {
    "/v1/chat/completions": "chat",
    "/invocations": "chat",
    "/v1/completions": "completions",
    "/generate": "generate",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/api/chat": "ollama",
    "/api/generate": "ollama",
    "/vertex_generate": "vertex",
    "/v1/audio/transcriptions": "transcription",
}
UNJUDGED = [
    "/v1/embeddings",
    "/v1/classify",
    "/classify",
    "/encode",
    "/v1/tokenize",
    "/tokenize",
    "/v1/detokenize",
    "/detokenize",
    "/v1/rerank",
    "/v1/score",
    "/v1/decisions",
    "/v1/systemone",
    "/v1/messages/count_tokens",
]


@pytest.mark.parametrize(("path", "dialect"), sorted(JUDGED.items()))
def test_every_sampling_route_of_the_engine_is_judged_by_its_dialect(path: str, dialect: str) -> None:
    """Each route SGLang 0.5.23 serves with sampling fields is judged, by its own dialect."""
    route = build_route_table().lookup(path.encode())
    assert route is not None and route.dialect is not None and route.dialect.name == dialect


@pytest.mark.parametrize("path", UNJUDGED)
def test_routes_that_sample_nothing_are_forwarded_unjudged(path: str) -> None:
    """Embeddings, tokenizing, scoring and the like are forwarded without judging."""
    route = build_route_table().lookup(path.encode())
    assert route is not None and route.dialect is None and b"POST" in route.methods


@pytest.mark.parametrize(
    "path",
    [
        "/v1/anything",
        "/V1/chat/completions",
        "/v1/chat",
        "/flush_cache",
        "/update_weights_from_disk",
        "/api/show",
        "/v1/responses/",
        "/v1/responses/a/b",
        "/v1/realtime",
        "/",
    ],
)
def test_every_other_path_is_refused(path: str) -> None:
    """Default-deny: a path outside the table (case and segments exact) has no route."""
    assert build_route_table().lookup(path.encode()) is None


def test_response_id_templates_match_one_segment() -> None:
    """GET /v1/responses/{id} and POST /v1/responses/{id}/cancel are forwarded unjudged."""
    table = build_route_table()
    got = table.lookup(b"/v1/responses/resp_1")
    assert got is not None and got.dialect is None and got.methods == {b"GET", b"HEAD"}
    cancel = table.lookup(b"/v1/responses/resp_1/cancel")
    assert cancel is not None and cancel.dialect is None and cancel.methods == {b"POST"}


def test_methods_follow_the_engine() -> None:
    """/generate is served on POST and PUT, chat on POST only (the engine's decorators)."""
    table = build_route_table()
    generate = table.lookup(b"/generate")
    chat = table.lookup(b"/v1/chat/completions")
    assert generate is not None and generate.methods == {b"POST", b"PUT"}
    assert chat is not None and chat.methods == {b"POST"}
    assert generate.allow == [(b"allow", b"POST, PUT")]


def test_route_flag_maps_a_moved_route_to_its_dialect() -> None:
    """--route PATH=DIALECT judges an extra path by a dialect (canonicalised like requests)."""
    table = build_route_table(["/ollama/chat=ollama", "/v1/endpoints/e/deployedModels/d%3Apredict=vertex"])
    moved = table.lookup(b"/ollama/chat")
    vertex = table.lookup(b"/v1/endpoints/e/deployedModels/d:predict")
    assert moved is not None and moved.dialect is OLLAMA and moved.origin == "--route"
    assert vertex is not None and vertex.dialect is VERTEX
    assert table.lookup(b"/api/chat") is not None  # the default stays


def test_unjudged_route_flag_forwards_one_path_on_purpose() -> None:
    """--unjudged-route PATH forwards that path unjudged, any method."""
    route = build_route_table(unjudged=["/get_model_info"]).lookup(b"/get_model_info")
    assert route is not None and route.dialect is None and b"GET" in route.methods


def test_generate_dialect_routes_take_put_too() -> None:
    """A path mapped to the generate dialect serves POST and PUT, like /generate."""
    route = build_route_table(["/gen2=generate"]).lookup(b"/gen2")
    assert route is not None and route.dialect is GENERATE and route.methods == {b"POST", b"PUT"}


def test_restating_a_default_route_is_accepted() -> None:
    """--route /v1/chat/completions=chat says what the default says: accepted, unchanged."""
    route = build_route_table(["/v1/chat/completions=chat"]).lookup(b"/v1/chat/completions")
    assert route is not None and route.dialect is CHAT and route.origin == "default"


@pytest.mark.parametrize(
    ("routes", "unjudged", "message"),
    [
        (["/x"], [], "expected PATH=DIALECT"),
        (["/x=klingon"], [], "unknown dialect 'klingon'"),
        (["x=chat"], [], "must start with '/'"),
        (["/x?y=chat"], [], "a path only"),
        (["/v1/messages=chat"], [], "judged as messages; it cannot be judged as chat"),
        ([], ["/v1/chat/completions"], "judged as chat; it cannot be forwarded unjudged"),
        (["/health=chat"], [], "the router's own endpoint"),
        ([], ["/v1/models/m"], "the router's own endpoint"),
        (["/x=chat", "/x=messages"], [], "mapped twice"),
        (["/x=chat"], ["/x"], "mapped twice"),
        (["/v1/responses/{id}=chat"], [], "no {id} templates"),
    ],
)
def test_bad_route_flags_are_refused_naming_flag_and_value(
    routes: list[str], unjudged: list[str], message: str
) -> None:
    """A --route/--unjudged-route the router cannot serve safely is a startup error."""
    with pytest.raises(RouteError, match=message.replace("{", r"\{").replace("}", r"\}").replace("?", r"\?")):
        build_route_table(routes, unjudged)


def test_table_lists_itself_for_get_contract() -> None:
    """GET /contract lists every route: path, methods, dialect, judged, where it came from."""
    listed = build_route_table(["/ollama/chat=ollama"]).to_json()
    by_path = {entry["path"]: entry for entry in listed}
    assert by_path["/v1/messages"] == {
        "path": "/v1/messages",
        "methods": ["POST"],
        "dialect": MESSAGES.name,
        "judged": True,
        "origin": "default",
    }
    assert by_path["/ollama/chat"]["origin"] == "--route"
    assert by_path["/v1/embeddings"]["judged"] is False
    assert by_path["/v1/audio/transcriptions"]["dialect"] == TRANSCRIPTION.name
