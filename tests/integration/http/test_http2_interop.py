"""The h2c server against independent HTTP/2 clients over loopback: nghttp2's h2load and curl."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from dataplane.http import Request, Responder
from tests.fakes.http_server import serving


async def digest(req: Request, resp: Responder) -> None:
    """Answers with the method, the body's length and its SHA-256 (a streamed answer on /stream)."""
    if req.path == b"/stream":
        resp.start(200, [(b"content-type", b"text/plain")])
        for i in range(50):
            await resp.write(b"%04d" % i * 1000)
        resp.end()
        return
    text = b"%s %d %s" % (req.method, len(req.body), hashlib.sha256(req.body).hexdigest().encode())
    resp.respond(200, [(b"content-type", b"text/plain"), (b"x-echo", req.header(b"x-echo") or b"")], text)


async def _run(*argv: str, timeout_s: float = 60) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (nghttp2-client) not installed")
async def test_h2load_requests_with_bodies_all_succeed(tmp_path: Path) -> None:
    """h2load: 4 connections x 16 concurrent streams, 2000 POSTs of 100 KiB (past the default windows): all 2xx."""
    body = tmp_path / "body"
    body.write_bytes(bytes(range(256)) * 400)
    async with serving(digest) as server:
        out = await _run(
            "h2load", "-n", "2000", "-c", "4", "-m", "16", "-d", str(body),
            "-H", "x-echo: interop", f"http://127.0.0.1:{server.port}/up",
        )  # fmt: skip
    assert re.search(
        r"requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored", out
    ), out
    assert "status codes: 2000 2xx" in out, out


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
async def test_curl_prior_knowledge_round_trip(tmp_path: Path) -> None:
    """curl --http2-prior-knowledge: a POST's body arrives whole, a streamed answer arrives whole, over HTTP/2."""
    payload = bytes(range(256)) * 1000
    (tmp_path / "body").write_bytes(payload)
    async with serving(digest) as server:
        base = f"http://127.0.0.1:{server.port}"
        out = await _run(
            "curl", "-s", "--http2-prior-knowledge", "--data-binary", f"@{tmp_path / 'body'}",
            "-H", "x-echo: curl", "-D", str(tmp_path / "head"), "-w", "\n%{http_version}", f"{base}/up",
        )  # fmt: skip
        streamed = await _run(
            "curl", "-s", "--http2-prior-knowledge", "-w", "\n%{http_version}", f"{base}/stream"
        )
    assert out == f"POST {len(payload)} {hashlib.sha256(payload).hexdigest()}\n2"
    head = (tmp_path / "head").read_text().lower()
    assert head.startswith("http/2 200") and "x-echo: curl" in head
    assert streamed == "".join(f"{i:04d}" * 1000 for i in range(50)) + "\n2"
