"""The callback-driven exchange (no task per request): each way it ends gives back what it held.

Driven with the router's own objects (its ``Forwarder`` with ``RouterMetrics`` and
``Admission``, a ``Request``, a ``Worker`` of a real ``RouterState``) and, for the parts the
exchange only sees through a base class or a Protocol (``StreamedResponse``, ``Abandonable``),
small classes that extend or implement it: compiled (scripts/build_mypyc.sh), the exchange
checks every declared type at run time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from dataplane.errors import UpstreamTimeout
from dataplane.http import Request, Responder
from dataplane.router.admission import Admission
from dataplane.router.balancer import Balancer, Policy
from dataplane.router.fleet.workers import Worker, WorkerSpec
from dataplane.router.metrics import RouterMetrics, RouteStats
from dataplane.router.path.exchange import Abandonable, Exchange
from dataplane.router.path.forwarder import Forwarder, ProxyConfig
from dataplane.router.state import RouterState
from dataplane.router.upstream.base import StreamedResponse

Headers = list[tuple[bytes, bytes]]
REVISION: Headers = [(b"x-contract-revision", b"7")]
WORKER = "http://127.0.0.1:9"


class RecordingResponder(Responder):
    """Records the one answer given; ``respond`` refuses a status it cannot encode (as the server does)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: tuple[int, Headers, bytes] | None = None
        self.aborted = False

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if not 100 <= status <= 999:
            raise ValueError("invalid status")
        self.answer = (status, headers, body)

    def abort(self) -> None:
        self.aborted = True

    @property
    def started(self) -> bool:
        return self.answer is not None

    @property
    def finished(self) -> bool:
        return self.answer is not None or self.aborted


class CompleteResponse(StreamedResponse):
    """An answer whose whole body came with its head (the small-answer fast path)."""

    def __init__(self, status: int = 200, body: bytes = b'{"ok":true}') -> None:
        self.status = status
        self.headers: Headers = [(b"content-type", b"application/json")]
        self._body = body

    def buffered_body(self) -> bytes | None:
        return self._body

    async def _none(self) -> AsyncIterator[bytes]:
        return
        yield b""

    def chunks(self) -> AsyncIterator[bytes]:
        return self._none()

    def abort(self) -> None:
        pass


class Connection:
    """An ``Abandonable`` upstream connection that remembers being abandoned."""

    def __init__(self) -> None:
        self.abandoned = False

    def abandon(self) -> None:
        self.abandoned = True


class Setup:
    """One exchange in flight (a slot held, the worker's in-flight count and work raised) and
    everything it should give back."""

    def __init__(self) -> None:
        self.admission = Admission(1, 0, 1.0)
        slot = self.admission.try_acquire()
        assert slot is not None
        state = RouterState()
        state.apply_workers([WorkerSpec(WORKER, "http1", ("m",))])
        self.worker: Worker = state.workers.workers[0]
        self.worker.inflight = 1  # as ``Proxy._send`` leaves it
        self.worker.work = 5
        self.metrics = RouterMetrics(state, self.admission)
        self.responder = RecordingResponder()
        self.stats: RouteStats = self.metrics.route("/v1/chat/completions")
        self.conn = Connection()
        balancer: Balancer[Worker] = Balancer(Policy.LEAST_LOAD)
        host = Forwarder(self.admission, balancer, self.metrics, ProxyConfig(request_timeout_s=30.0))
        request = Request(
            b"POST", b"/v1/chat/completions", [(b"content-type", b"application/json")], b"{}", False
        )
        self.exchange = Exchange(
            host, self.stats, 0.0, request, self.responder, self.worker, slot, REVISION, False, 5
        )
        conn: Abandonable = self.conn
        self.exchange.conn = conn

    def outcomes(self) -> dict[tuple[str, str, str], int]:
        return self.metrics.upstream


def _response(status: int = 200) -> StreamedResponse:
    return CompleteResponse(status=status)


async def test_complete_answer_is_relayed_with_the_revision_and_everything_given_back() -> None:
    """A complete answer goes out with x-contract-revision; slot and in-flight count are returned."""
    s = Setup()
    s.exchange.on_response(_response())
    assert s.responder.answer == (
        200,
        [(b"content-type", b"application/json"), *REVISION],
        b'{"ok":true}',
    )
    assert (s.admission.in_use, s.worker.inflight, s.worker.work, s.stats.by_status, s.outcomes()) == (
        0,
        0,
        0,
        {200: 1},
        {(WORKER, "http1", "ok"): 1},
    )
    assert s.metrics.timing["http1"].first_byte.count == 1 and s.metrics.timing["http1"].duration.count == 1


async def test_timeout_before_the_head_is_504_and_everything_given_back() -> None:
    """A deadline before the head answers 504 upstream_timeout and counts the worker failure."""
    s = Setup()
    s.exchange.on_failure(UpstreamTimeout())
    answer = s.responder.answer
    assert answer is not None and answer[0] == 504
    assert json.loads(answer[2])["error"]["code"] == "upstream_timeout"
    assert answer[1][-1] == REVISION[0]
    assert (s.admission.in_use, s.worker.inflight, s.worker.work, s.worker.consecutive_failures) == (
        0,
        0,
        0,
        1,
    )
    assert (s.stats.by_status, s.outcomes()) == ({504: 1}, {(WORKER, "http1", "timeout"): 1})


async def test_client_leaving_closes_the_upstream_connection_and_counts_499() -> None:
    """A client gone before the head: the worker connection is abandoned, the answer aborted, 499 counted."""
    s = Setup()
    s.exchange.on_client_gone()
    assert s.conn.abandoned and s.responder.aborted
    assert (s.admission.in_use, s.worker.inflight, s.worker.work, s.stats.by_status, s.outcomes()) == (
        0,
        0,
        0,
        {499: 1},
        {(WORKER, "http1", "client_gone"): 1},
    )


@pytest.mark.parametrize("broken", ["metrics", "answer"])
async def test_a_bug_in_a_callback_answers_500_and_leaks_nothing(broken: str) -> None:
    """A callback that raises answers 500 internal_error and still returns the slot and in-flight count once."""
    s = Setup()
    if broken == "metrics":
        # A corrupted histogram: the observation after the answer went out raises IndexError.
        s.metrics.timing["http1"].duration._slots.clear()
    s.exchange.on_response(_response(status=1000 if broken == "answer" else 200))
    answer = s.responder.answer
    if broken == "answer":
        assert answer is not None and answer[0] == 500
        assert answer[1][-1] == (b"x-router-error-code", b"internal_error")
        assert s.conn.abandoned is False  # the head had arrived: nothing left to abandon
    else:  # the answer went out before the bug: nothing more to send
        assert answer is not None and answer[0] == 200
    assert (s.admission.in_use, s.worker.inflight, s.worker.work) == (0, 0, 0)
