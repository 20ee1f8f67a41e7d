"""engine-sim reads the sampling fields of each route as SGLang 0.5.23's own code does (the oracle).

For every pinned body, engine-sim refuses exactly when the real engine refuses, and every field
the real engine takes from the body is the value engine-sim reports in ``x-sim-sampling-params``.
(``/generate`` is left out: engine-sim still reads it without the engine's schema gate.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes import sglang_engine as engine
from tests.fakes.sim_http import Http

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)

# Raw JSON texts of a sampling value, the tricky ones of SPEC §4 among them.
VALUES = [
    b"0.5",
    b"1",
    b'"0.5"',
    b'" 2_0 "',
    b'"nan"',
    b"true",
    b"null",
    b"NaN",
    b"1e400",
    b"[0.5]",
    b'{"v":1}',
    b"40.0",
    b"-1",
    b"0",
]
MSG = b'"messages":[{"role":"user","content":"hi"}]'
ROUTES: dict[str, tuple[Callable[[bytes], bytes], engine.Reading | Any]] = {
    "/v1/chat/completions": (lambda inner: b'{"model":"m",' + MSG + inner + b"}", engine.chat),
    "/invocations": (lambda inner: b'{"model":"m",' + MSG + inner + b"}", engine.chat),
    "/v1/completions": (lambda inner: b'{"model":"m","prompt":"hi"' + inner + b"}", engine.completions),
    "/v1/responses": (lambda inner: b'{"model":"m","input":"hi"' + inner + b"}", engine.responses),
    "/v1/messages": (lambda inner: b'{"model":"m","max_tokens":4,' + MSG + inner + b"}", engine.messages),
    "/api/chat": (
        lambda inner: b'{"model":"m","stream":false,' + MSG + b',"options":{"x":0' + inner + b"}}",
        engine.ollama_chat,
    ),
    "/api/generate": (
        lambda inner: b'{"model":"m","prompt":"hi","options":{"x":0' + inner + b"}}",
        engine.ollama_generate,
    ),
    "/vertex_generate": (
        lambda inner: (
            b'{"instances":[{"text":"hi"}],"parameters":{"sampling_params":{"max_new_tokens":2'
            + inner
            + b"}}}"
        ),
        engine.vertex,
    ),
}


def _bodies(wrap: Callable[[bytes], bytes]) -> list[bytes]:
    out = [wrap(b"")]
    for field in engine.FIELDS:
        for value in VALUES:
            out.append(wrap(b',"' + field.encode() + b'":' + value))
    out.append(wrap(b',"temperature":0.2,"temperature":"0.7"'))
    out.append(wrap(b',"top_p":0.9,"top_p":null'))
    plain = wrap(b',"temperature":0.5')
    out += [b"\xef\xbb\xbf" + plain, plain.decode().encode("utf-16"), plain.decode().encode("utf-16-le")]
    return out


def _agree(path: str, body: bytes, reply: Any, reading: engine.Reading) -> None:
    where = f"{path} {body[:160]!r}"
    if isinstance(reading, engine.Refused):
        assert reply.status != 200, f"{where}: the engine refuses ({reading}), engine-sim answered 200"
        return
    assert reply.status == 200, (
        f"{where}: the engine samples, engine-sim answered {reply.status} {reply.body[:200]!r}"
    )
    shown = json.loads(reply.headers["x-sim-sampling-params"])
    shown = shown[0] if isinstance(shown, list) else shown
    for sampling in reading:
        for field in engine.FIELDS:
            if sampling.from_body(field):
                assert field in shown, f"{where}: the engine reads {field}, engine-sim does not"
                got, want = shown[field], sampling.value(field)
                assert got == want and type(got) is type(want), (
                    f"{where}: {field} {got!r} != engine's {want!r}"
                )
            elif field in shown:
                # Not from the body: engine-sim shows null (an unset Optional) or the same default.
                assert shown[field] in (None, sampling.value(field)), (
                    f"{where}: {field} shown as {shown[field]!r}"
                )


@pytest.mark.parametrize("path", list(ROUTES))
async def test_engine_sim_reads_every_route_as_the_engine(make_sim: Any, path: str) -> None:
    """Pinned bodies on each route: same refusals, same values for what the body sets."""
    wrap, read = ROUTES[path]
    sim = await make_sim()
    async with Http(sim.url, "http1") as http:
        for body in _bodies(wrap):
            _agree(path, body, await http.post(path, raw=body), read(body))
