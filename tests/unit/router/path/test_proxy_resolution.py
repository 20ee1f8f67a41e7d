"""A judged request's model is resolved in the snapshots it is judged by (SPEC §3.2, §5): a new
worker set or contract set applies to the very next request for the same model."""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any

from controlplane.contracts import parse_contract_json
from dataplane.http import Request, Responder
from dataplane.router.admission import Admission
from dataplane.router.balancer import Balancer, Policy
from dataplane.router.contract.routes import build_route_table
from dataplane.router.fleet.workers import Worker, WorkerSpec
from dataplane.router.metrics import RouterMetrics
from dataplane.router.path.forwarder import ProxyConfig
from dataplane.router.path.proxy import Proxy
from dataplane.router.state import RouterState
from tests.fakes.upstream import FakePool

Headers = list[tuple[bytes, bytes]]


class RecordingResponder(Responder):
    """Records the one answer given."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: tuple[int, Headers, bytes] | None = None

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self.answer = (status, headers, body)


def _proxy(state: RouterState) -> Proxy:
    admission = Admission(4, 4, 1.0)
    balancer: Balancer[Worker] = Balancer(Policy.LEAST_LOAD)
    return Proxy(
        state,
        admission,
        balancer,
        RouterMetrics(state, admission),
        ProxyConfig(request_timeout_s=30.0),
        build_route_table(),
    )


def _chat(proxy: Proxy, model: str, temperature: float = 0.5) -> int | None:
    """The status answered at once, or None when the request went on to a worker."""
    body = json.dumps({"model": model, "temperature": temperature, "messages": []}).encode()
    request = Request(b"POST", b"/v1/chat/completions", [(b"content-type", b"application/json")], body, False)
    responder = RecordingResponder()
    handled = proxy.handle(request, responder)
    if isinstance(handled, Coroutine):
        forwarding: Coroutine[Any, Any, None] = handled
        forwarding.close()  # FakePool: the task path, never run
        return None
    assert responder.answer is not None
    return responder.answer[0]


async def test_a_new_worker_set_applies_to_the_next_request_for_the_same_model() -> None:
    """A model served, then no longer served: the next request for it is 404."""
    state = RouterState.standalone(None)
    state.apply_workers([WorkerSpec("http://a:1", "http1", ("m",))], FakePool)
    proxy = _proxy(state)
    assert _chat(proxy, "m") is None
    assert _chat(proxy, "m") is None
    state.apply_workers([WorkerSpec("http://a:1", "http1", ("n",))], FakePool)
    assert _chat(proxy, "m") == 404
    assert _chat(proxy, "n") is None


async def test_a_new_contract_set_applies_to_the_next_request_for_the_same_model() -> None:
    """A model without a contract, then with one for its scope: the next request is judged by it."""
    state = RouterState.standalone(None)
    state.apply_workers([WorkerSpec("http://a:1", "http1", ("m",))], FakePool)
    proxy = _proxy(state)
    assert _chat(proxy, "m", temperature=0.9) is None
    state.apply_contracts(1, {"m": parse_contract_json('{"temperature": {"min": 0, "max": 0.5}}', "reject")})
    assert _chat(proxy, "m", temperature=0.9) == 400
    assert _chat(proxy, "m", temperature=0.4) is None
