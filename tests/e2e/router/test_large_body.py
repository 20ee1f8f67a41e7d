"""A multi-MiB chat body through a real router (SPEC §3.3): spliced as segments, it reaches an
HTTP/1.1 and an h2c engine with the injected values read last and the client's values intact."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL, engine_read, post
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess

CONTRACT = {"temperature": 0.5, "top_p": 0.9, "n": 1}
SIM_FLAGS = ("--model", MODEL, "--max-total-tokens", "8000000")


@pytest.fixture(scope="module")
def router() -> Iterator[RouterProcess]:
    with (
        EngineSim(*SIM_FLAGS) as h1,
        EngineSim(*SIM_FLAGS, "--http2") as h2c,
        RouterProcess(
            "--worker",
            h1.url,
            "--worker",
            f"h2c://{h2c.host}:{h2c.port}",
            "--override-sampling-params",
            json.dumps(CONTRACT),
        ) as r,
    ):
        yield r


def test_large_bodies_reach_both_workers_with_the_injection(router: RouterProcess) -> None:
    """Every 4 MiB body (escapes, quotes, non-ASCII) is answered 200 by whichever worker took it,
    which read the contracted values; the client's temperature passed as sent."""
    text = 'café "quoted" — line\nbreak 😀 ' * 110_000
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0.5}
    ).encode()
    assert len(body) > 4_000_000
    engines = set()
    for _ in range(4):  # ties rotate: the h1 and the h2c worker take turns
        status, headers, answer = post(router.url, "/v1/chat/completions", body, timeout_s=30)
        assert status == 200, answer[:300]
        read = engine_read(headers)
        assert (read["temperature"], read["top_p"], read["n"]) == (0.5, 0.9, 1)
        engines.add(json.loads(answer)["id"].split("-", 1)[1][:8])  # engine-sim's process prefix
    assert len(engines) == 2


def test_large_generate_body_gets_its_sampling_params_restated(router: RouterProcess) -> None:
    """A 4 MiB /generate body: the client's sampling_params is re-stated last with the injected
    values inside it (spliced as segments), and the engine reads them."""
    text = 'café "quoted" — line\nbreak 😀 ' * 110_000
    body = json.dumps(
        {"sampling_params": {"temperature": 0.5, "max_new_tokens": 1}, "text": text, "model": MODEL}
    ).encode()
    for _ in range(2):  # one per worker
        status, headers, answer = post(router.url, "/generate", body, timeout_s=30)
        assert status == 200, answer[:300]
        read = engine_read(headers)
        assert (read["temperature"], read["top_p"], read["n"]) == (0.5, 0.9, 1)
