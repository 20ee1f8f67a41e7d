"""``--worker-api-key``: workers that want a key (SGLang's ``--api-key``) get it on every request, probes included."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.fakes.chat_client import MODEL
from tests.fakes.cli import fleetplane
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess

WORKER_KEY = "sk-worker-0123456789abcdef"


@pytest.mark.parametrize("protocol", ["http1", "h2c"])
def test_every_exchange_with_a_keyed_worker_carries_the_key(protocol: str, tmp_path: Path) -> None:
    """Discovery, requests and health checks reach a worker that answers 401 unless the request
    carries exactly one Authorization, its key: so the client's own key never reaches it."""
    key_file = tmp_path / "worker.key"
    key_file.write_text(WORKER_KEY + "\n")
    http2 = ["--http2"] if protocol == "h2c" else []
    with (
        EngineSim("--model", MODEL, "--api-key", WORKER_KEY, *http2) as worker,
        RouterProcess(
            "--worker", worker.url, "--worker-api-key-file", str(key_file), "--health-check-interval-s", "0.1"
        ) as router,
    ):
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="sk-client-not-the-worker", max_retries=0)
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert answer.choices[0].message.content
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
        )
        assert list(stream)
        # Health checks every 0.1 s with the key: the worker stays in rotation.
        time.sleep(1.0)
        with urllib.request.urlopen(router.url + "/metrics", timeout=10) as metrics:
            text = metrics.read().decode()
        assert f'fleetplane_worker_healthy{{worker="{worker.url}"}} 1.0' in text
        assert WORKER_KEY not in "\n".join(router.output)


def test_without_the_key_a_keyed_worker_is_not_discovered() -> None:
    """The same worker without ``--worker-api-key``: discovery is refused, the router does not start."""
    with EngineSim("--model", MODEL, "--api-key", WORKER_KEY) as worker:
        done = fleetplane("router", "--listen", "127.0.0.1:0", "--worker", worker.url)
    assert done.returncode == 2
    assert "--worker" in done.stderr


def test_the_key_is_never_shown_in_help() -> None:
    """``--help`` with the key in the environment says it is set, never what it is."""
    done = fleetplane("router", "--help", env={"FLEETPLANE_WORKER_API_KEY": WORKER_KEY})
    assert done.returncode == 0
    assert "--worker-api-key" in done.stdout
    assert WORKER_KEY not in done.stdout
