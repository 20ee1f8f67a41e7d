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


class Refused:
    """An exchange on the callback path to an h2c worker (the group's first), with its slot held
    and the worker's counts raised as ``Forwarder._send`` leaves them."""

    def __init__(self, urls: list[str], headers: Headers) -> None:
        state = RouterState()
        state.apply_workers([WorkerSpec(u, "h2c" if u.startswith("h2c") else "http1", ("m",)) for u in urls])
        self.workers = state.workers.workers
        self.admission = Admission(1, 0, 1.0)
        slot = self.admission.try_acquire()
        assert slot is not None
        metrics = RouterMetrics(state, self.admission)
        balancer: Balancer[Worker] = Balancer(Policy.LEAST_LOAD)
        forwarder = Forwarder(self.admission, balancer, metrics, ProxyConfig(request_timeout_s=5.0))
        target = b"/v1/chat/completions"
        self.responder = Answered()
        refusing = self.workers[0]
        refusing.inflight, refusing.work = 1, 5
        self.exchange = Exchange(
            forwarder,
            metrics.route(target.decode()),
            0.0,
            Request(b"POST", target, headers, b"{}", False),
            self.responder,
            refusing,
            slot,
            REVISION,
            False,
            5,
        )
        self.exchange.resend = (target, b"{}", headers, tuple(self.workers))

    async def close(self) -> None:
        for worker in self.workers:
            await worker.pool.close()


async def test_a_twice_refused_stream_is_answered_by_another_worker() -> None:
    """Told UpstreamUnreachable by the h2c pool: the next worker answers, the slot comes back."""

    async def other_worker(request: Request, responder: Responder) -> None:
        responder.respond(200, [(b"content-type", b"application/json")], b'{"from":"other"}')

    server = await start_server(other_worker, "127.0.0.1", 0)
    # The refusing worker is never dialled again: it is the one that was tried.
    case = Refused(
        ["h2c://127.0.0.1:9", f"http://127.0.0.1:{server.port}"], [(b"content-type", b"application/json")]
    )
    refusing, other = case.workers
    try:
        case.exchange.on_failure(UpstreamUnreachable())
        await asyncio.wait_for(case.responder.done, 5)
        assert (case.responder.status, case.responder.body) == (200, b'{"from":"other"}')
        assert (refusing.inflight, refusing.work, refusing.consecutive_failures) == (0, 0, 1)
        await asyncio.sleep(0)  # the task's last step
        assert case.admission.in_use == 0 and other.inflight == 0
    finally:
        await case.close()
        await server.drain(0.1)


async def test_without_another_worker_the_client_gets_the_502() -> None:
    """Only the refusing worker in the group: 502 upstream_unreachable, as on the task path."""
    case = Refused(["h2c://127.0.0.1:9"], [])
    try:
        case.exchange.on_failure(UpstreamUnreachable())
        await asyncio.wait_for(case.responder.done, 5)
        assert case.responder.status == 502 and b"upstream_unreachable" in case.responder.body
        await asyncio.sleep(0)
        assert case.admission.in_use == 0
    finally:
        await case.close()
