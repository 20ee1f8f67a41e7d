"""A request on the callback path to an h2c worker that refuses its stream on both tries (RFC 9113
§8.7: nothing reached the worker) is forwarded to another worker by the task path (SPEC §5),
not answered 502: the router's own ``Forwarder`` and ``Exchange``, a real HTTP/1.1 worker on
loopback for the second try."""

from __future__ import annotations

import asyncio

from dataplane.errors import UpstreamUnreachable
from dataplane.http import Request, Responder, start_server
from dataplane.router.admission import Admission
from dataplane.router.balancer import Balancer, Policy
from dataplane.router.fleet.workers import Worker, WorkerSpec
from dataplane.router.metrics import RouterMetrics
from dataplane.router.path.exchange import Exchange
from dataplane.router.path.forwarder import Forwarder, ProxyConfig
from dataplane.router.state import RouterState

Headers = list[tuple[bytes, bytes]]
REVISION: Headers = [(b"x-contract-revision", b"3")]


class Answered(Responder):
    """Remembers the one answer given to the client, whole."""

    def __init__(self) -> None:
        super().__init__()
        self.status = 0
        self.body = b""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self.status, self.body = status, body
        self.done.set_result(None)

    def start(self, status: int, headers: Headers) -> None:
        self.status = status

    async def write(self, chunk: bytes) -> None:
        self.body += chunk

    def end(self) -> None:
        self.done.set_result(None)

    def abort(self) -> None:
        self.done.set_result(None)

    @property
    def started(self) -> bool:
        return self.status != 0

    @property
    def finished(self) -> bool:
        return self.done.done()


async def test_a_twice_refused_stream_is_answered_by_another_worker() -> None:
    """Told UpstreamUnreachable by the h2c pool: the next worker answers, the slot comes back."""

    async def other_worker(request: Request, responder: Responder) -> None:
        responder.respond(200, [(b"content-type", b"application/json")], b'{"from":"other"}')

    server = await start_server(other_worker, "127.0.0.1", 0)
    state = RouterState()
    # The refusing worker is never dialled again: it is the one that was tried.
    state.apply_workers(
        [
            WorkerSpec("h2c://127.0.0.1:9", "h2c", ("m",)),
            WorkerSpec(f"http://127.0.0.1:{server.port}", "http1", ("m",)),
        ]
    )
    refusing, other = state.workers.workers
    admission = Admission(1, 0, 1.0)
    slot = admission.try_acquire()
    assert slot is not None
    metrics = RouterMetrics(state, admission)
    balancer: Balancer[Worker] = Balancer(Policy.LEAST_LOAD, Worker.load, Worker.wait)
    forwarder = Forwarder(admission, balancer, metrics, ProxyConfig(request_timeout_s=5.0))
    request = Request(
        b"POST", b"/v1/chat/completions", [(b"content-type", b"application/json")], b"{}", False
    )
    responder = Answered()
    refusing.inflight, refusing.work = 1, 5  # as ``Forwarder._send`` leaves them
    exchange = Exchange(
        forwarder,
        metrics.route("/v1/chat/completions"),
        0.0,
        request,
        responder,
        refusing,
        slot,
        REVISION,
        False,
        5,
    )
    exchange.resend = (
        b"/v1/chat/completions",
        b"{}",
        [(b"content-type", b"application/json")],
        (refusing, other),
    )
    try:
        exchange.on_failure(UpstreamUnreachable())
        await asyncio.wait_for(responder.done, 5)
        assert (responder.status, responder.body) == (200, b'{"from":"other"}')
        assert (refusing.inflight, refusing.work, refusing.consecutive_failures) == (0, 0, 1)
        await asyncio.sleep(0)  # the task's last step
        assert admission.in_use == 0 and other.inflight == 0
    finally:
        for worker in (refusing, other):
            await worker.pool.close()
        await server.drain(0.1)


async def test_without_another_worker_the_client_gets_the_502() -> None:
    """Only the refusing worker in the group: 502 upstream_unreachable, as on the task path."""
    state = RouterState()
    state.apply_workers([WorkerSpec("h2c://127.0.0.1:9", "h2c", ("m",))])
    (refusing,) = state.workers.workers
    admission = Admission(1, 0, 1.0)
    slot = admission.try_acquire()
    assert slot is not None
    metrics = RouterMetrics(state, admission)
    balancer: Balancer[Worker] = Balancer(Policy.LEAST_LOAD, Worker.load, Worker.wait)
    forwarder = Forwarder(admission, balancer, metrics, ProxyConfig(request_timeout_s=5.0))
    request = Request(b"POST", b"/v1/chat/completions", [], b"{}", False)
    responder = Answered()
    refusing.inflight = 1
    exchange = Exchange(
        forwarder,
        metrics.route("/v1/chat/completions"),
        0.0,
        request,
        responder,
        refusing,
        slot,
        REVISION,
        False,
        0,
    )
    exchange.resend = (b"/v1/chat/completions", b"{}", [], (refusing,))
    try:
        exchange.on_failure(UpstreamUnreachable())
        await asyncio.wait_for(responder.done, 5)
        assert responder.status == 502 and b"upstream_unreachable" in responder.body
        await asyncio.sleep(0)
        assert admission.in_use == 0
    finally:
        await refusing.pool.close()
