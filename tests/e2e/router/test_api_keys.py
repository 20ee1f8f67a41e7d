"""``--api-keys``: the openai and anthropic clients with their keys, refusals, open probes, per-client counts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from tests.fakes.chat_client import MODEL
from tests.fakes.cli import fleetplane
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess

KEYS = {"team-a": {"key": "sk-team-a-0123456789abcdef"}, "team-b": {"key": "sk-team-b-0123456789abcdef"}}


@pytest.fixture(scope="module")
def router(
    sims: tuple[EngineSim, EngineSim], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RouterProcess]:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps(KEYS))
    a, _ = sims
    with RouterProcess(
        "--worker", a.url, "--api-keys", str(keys), "--override-sampling-params", '{"temperature": 0.25}'
    ) as r:
        yield r


def _openai(router: RouterProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=10)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_openai_client_with_its_key_is_served(router: RouterProcess) -> None:
    """``OpenAI(api_key=KEY)`` chats and lists models."""
    client = _openai(router, KEYS["team-a"]["key"])
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert raw.parse().choices[0].message.content
    assert [m.id for m in client.models.list()] == [MODEL]


def test_a_wrong_or_missing_key_is_401_invalid_api_key(router: RouterProcess) -> None:
    """A wrong key is ``AuthenticationError`` with code invalid_api_key; no key at all too."""
    with pytest.raises(openai.AuthenticationError) as info:
        _openai(router, "sk-not-a-key-0123456789").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
    assert info.value.code == "invalid_api_key"
    status, body = _get(router.url + "/v1/models")
    assert status == 401
    assert json.loads(body)["error"]["code"] == "invalid_api_key"
    status, _ = _get(router.url + "/no/such/path")
    assert status == 401  # nothing about the route table before a key


def test_the_anthropic_client_sends_x_api_key(router: RouterProcess) -> None:
    """``Anthropic(api_key=KEY)`` (``x-api-key``) is let through; a wrong one gets AuthenticationError."""
    good = anthropic.Anthropic(base_url=router.url, api_key=KEYS["team-b"]["key"], max_retries=0, timeout=10)
    message = good.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert message.content
    bad = anthropic.Anthropic(
        base_url=router.url, api_key="sk-wrong-0123456789abcdef", max_retries=0, timeout=10
    )
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}])


def test_probes_and_scrapes_need_no_key(router: RouterProcess) -> None:
    """/health, /readiness, /metrics and /contract answer without a key (probes and Prometheus)."""
    for path in ("/health", "/readiness", "/metrics", "/contract"):
        status, _ = _get(router.url + path)
        assert status == 200, path


def test_requests_and_rejections_are_counted_per_client(router: RouterProcess) -> None:
    """``/metrics`` counts each client's requests and its contract rejections by field."""
    _openai(router, KEYS["team-a"]["key"]).models.list()
    client = _openai(router, KEYS["team-b"]["key"])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0.9
        )
    _, body = _get(router.url + "/metrics")
    text = body.decode()
    assert 'fleetplane_client_rejections_total{client="team-b",param="temperature"} 1.0' in text
    assert 'fleetplane_client_requests_total{client="team-a"}' in text
    assert KEYS["team-a"]["key"] not in text


def test_a_bad_key_file_stops_the_router_with_one_line(tmp_path: Path) -> None:
    """A key file that is not JSON: exit 2 and one line naming the flag, the file and the problem."""
    bad = tmp_path / "keys.json"
    bad.write_text('{"team-a": {"key": "sk-secret-0123456789"}')
    done = fleetplane("router", "--api-keys", str(bad))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"--api-keys '{bad}': not valid JSON" in lines[0]
    assert "sk-secret" not in done.stderr
