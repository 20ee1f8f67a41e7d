"""``--listen-tls-cert/--listen-tls-key``: HTTPS on the front door, HTTP/2 or HTTP/1.1 by ALPN."""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from tests.fakes.chat_client import MODEL
from tests.fakes.cli import fleetplane
from tests.fakes.engine_sim import EngineSim
from tests.fakes.pki import make_pki
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def router(sims: tuple[EngineSim, EngineSim], pki: Path) -> Iterator[RouterProcess]:
    a, _ = sims
    with RouterProcess(
        "--worker",
        a.url,
        "--listen-tls-cert",
        str(pki / "server.pem"),
        "--listen-tls-key",
        str(pki / "server.key"),
    ) as r:
        yield r


def _curl(pki: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "--cacert", str(pki / "ca.pem"), "-w", "\n%{http_version}", *args],
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.parametrize(("flag", "version"), [("--http1.1", "1.1"), ("--http2", "2")])
def test_curl_over_tls_gets_the_protocol_it_asks_alpn_for(
    router: RouterProcess, pki: Path, flag: str, version: str
) -> None:
    """curl over HTTPS, offering h2 or only http/1.1 by ALPN: served in that protocol."""
    assert router.url.startswith("https://")
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    done = _curl(
        pki, flag, "-H", "content-type: application/json", "-d", body, router.url + "/v1/chat/completions"
    )
    assert done.returncode == 0, done.stderr
    answer, served = done.stdout.rsplit("\n", 1)
    assert served == version
    assert json.loads(answer)["choices"][0]["message"]["content"]


@pytest.mark.parametrize("http2", [False, True])
def test_the_openai_client_over_https(router: RouterProcess, pki: Path, http2: bool) -> None:
    """The openai client trusting the test CA chats over HTTPS, on HTTP/1.1 and on HTTP/2."""
    http = httpx2.Client(
        verify=ssl.create_default_context(cafile=str(pki / "ca.pem")), timeout=10, http2=http2
    )
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, http_client=http)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert raw.parse().choices[0].message.content
    assert raw.http_response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    http.close()


def test_plain_http_to_the_tls_listener_gets_no_answer(router: RouterProcess) -> None:
    """A plain-text client on the HTTPS port is not served (no downgrade)."""
    with pytest.raises(httpx2.HTTPError):
        httpx2.get(router.url.replace("https://", "http://") + "/health", timeout=5)


def test_a_cert_without_its_key_is_one_startup_line(pki: Path) -> None:
    """--listen-tls-cert alone: exit 2, one line naming the missing flag."""
    done = fleetplane("router", "--listen", "127.0.0.1:0", "--listen-tls-cert", str(pki / "server.pem"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"fleetplane router: --listen-tls-cert {str(pki / 'server.pem')!r}: needs --listen-tls-key too"
    ]


def test_a_key_that_is_not_a_key_is_one_startup_line(pki: Path) -> None:
    """A certificate given as the key: exit 2, one line naming both files."""
    cert = str(pki / "server.pem")
    done = fleetplane(
        "router", "--listen", "127.0.0.1:0", "--listen-tls-cert", cert, "--listen-tls-key", cert
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--listen-tls-key" in lines[0] and "unusable" in lines[0], done.stderr
