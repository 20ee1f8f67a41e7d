"""Methods on the router's endpoints (SPEC §5; RFC 9110 §9.3.2 HEAD, §15.5.6 405 + Allow)."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.h2c import h2c_requests
from tests.fakes.raw_http import MODEL, envelope, request
from tests.fakes.router import RouterProcess

GET_PATHS = ["/health", "/readiness", "/v1/models", "/contract"]


@pytest.mark.parametrize("path", GET_PATHS)
def test_head_answers_like_get_without_a_body(router: RouterProcess, path: str) -> None:
    """HEAD on a GET endpoint is 200 with GET's headers (content-length included) and no body."""
    got = request(router, "GET", path)
    head = request(router, "HEAD", path)
    assert head.status == got.status == 200
    assert head.body == b""
    assert head.headers["content-length"] == str(len(got.body))
    assert head.headers["content-type"] == got.headers["content-type"]


def test_head_over_h2c(router: RouterProcess) -> None:
    """HEAD /health over h2c prior knowledge is 200 with an empty body."""
    [(headers, body)] = h2c_requests(router, [("HEAD", "/health", None)])
    assert headers[":status"] == "200"
    assert body == b""


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "HEAD"])
@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/generate", "POST, PUT")],
)
def test_judged_endpoint_with_another_method_is_405_naming_its_methods(
    router: RouterProcess, method: str, path: str, allowed: str
) -> None:
    """A judged route asked with a method it does not serve is 405 naming its methods in Allow
    (the engine serves /generate on POST and PUT, SPEC §5.1)."""
    if method in allowed:
        return
    answer = request(router, method, path)
    assert answer.status == 405
    assert answer.headers["allow"] == allowed
    if method != "HEAD":
        assert envelope(answer)["code"] == "method_not_allowed"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/health", "/readiness", "/metrics", "/contract"])
def test_get_endpoint_with_another_method_is_405_allow_get(
    router: RouterProcess, method: str, path: str
) -> None:
    """A GET endpoint asked with another method is 405 naming GET and HEAD in Allow."""
    answer = request(router, method, path, body=b"{}")
    assert answer.status == 405
    assert answer.headers["allow"] == "GET, HEAD"
    assert envelope(answer)["code"] == "method_not_allowed"


def test_unknown_path_is_404_in_the_envelope(router: RouterProcess) -> None:
    """A path the router does not serve is 404 with the error envelope, for any method."""
    for method in ("GET", "POST", "HEAD"):
        answer = request(router, method, "/nope", body=b"{}")
        assert answer.status == 404
        if method != "HEAD":
            assert envelope(answer)["code"] == "route_not_found"


def test_openai_models_retrieve(router: RouterProcess) -> None:
    """GET /v1/models/{model} (openai's models.retrieve) answers a served model, else 404 model_not_found."""
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=10)
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("org/not-served")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert request(router, "HEAD", f"/v1/models/{MODEL}").status == 200
