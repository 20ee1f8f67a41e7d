"""The callback-driven exchange (no task per request): each way it ends gives back what it held."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from dataplane.errors import UpstreamTimeout
from dataplane.http import Responder
from dataplane.router.admission import Admission
from dataplane.router.fleet.workers import Worker, WorkerSpec
from dataplane.router.metrics import RouteStats, UpstreamTiming
from dataplane.router.path.exchange import Exchange

Headers = list[tuple[bytes, bytes]]
REVISION: Headers = [(b"x-contract-revision", b"7")]


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


class Metrics:
    def __init__(self, broken: bool = False) -> None:
        self.outcomes: list[str] = []
        self.broken = broken
        self.timing = {"http1": UpstreamTiming(), "h2c": UpstreamTiming()}

    def upstream_outcome(self, url: str, protocol: str, outcome: str) -> None:
        if self.broken:
            raise RuntimeError("bug")
        self.outcomes.append(outcome)


class Response:
    def __init__(self, status: int = 200, body: bytes = b'{"ok":true}') -> None:
        self.status = status
        self.headers: Headers = [(b"content-type", b"application/json")]
        self._body = body

    def buffered_body(self) -> bytes:
        return self._body


class Connection:
    abandoned = False

    def abandon(self) -> None:
        self.abandoned = True


class Proxy:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics


def _exchange(metrics: Metrics) -> tuple[Exchange, RecordingResponder, Admission, Worker, RouteStats]:
    admission = Admission(1, 0, 1.0)
    slot = admission.try_acquire()
    assert slot is not None
    worker = Worker(WorkerSpec("http://w:1", "http1", ("m",)), cast(Any, None))
    worker.inflight = 1  # as ``Proxy._send`` leaves it
    worker.work = 5
    responder = RecordingResponder()
    stats = RouteStats("/v1/chat/completions")
    exchange = Exchange(
        cast(Any, Proxy(metrics)), stats, 0.0, cast(Any, None), responder, worker, slot, REVISION, False, 5
    )
    exchange.conn = cast(Any, Connection())
    return exchange, responder, admission, worker, stats


def test_complete_answer_is_relayed_with_the_revision_and_everything_given_back() -> None:
    """A complete answer goes out with x-contract-revision; slot and in-flight count are returned."""
    metrics = Metrics()
    exchange, responder, admission, worker, stats = _exchange(metrics)
    exchange.on_response(cast(Any, Response()))
    assert responder.answer == (
        200,
        [(b"content-type", b"application/json"), *REVISION],
        b'{"ok":true}',
    )
    assert (admission.in_use, worker.inflight, worker.work, stats.by_status, metrics.outcomes) == (
        0,
        0,
        0,
        {200: 1},
        ["ok"],
    )


def test_timeout_before_the_head_is_504_and_everything_given_back() -> None:
    """A deadline before the head answers 504 upstream_timeout and counts the worker failure."""
    metrics = Metrics()
    exchange, responder, admission, worker, stats = _exchange(metrics)
    exchange.on_failure(UpstreamTimeout())
    assert responder.answer is not None and responder.answer[0] == 504
    assert json.loads(responder.answer[2])["error"]["code"] == "upstream_timeout"
    assert (admission.in_use, worker.inflight, worker.work, worker.consecutive_failures) == (0, 0, 0, 1)
    assert (stats.by_status, metrics.outcomes) == ({504: 1}, ["timeout"])


def test_client_leaving_closes_the_upstream_connection_and_counts_499() -> None:
    """A client gone before the head: the worker connection is abandoned, the answer aborted, 499 counted."""
    metrics = Metrics()
    exchange, responder, admission, worker, stats = _exchange(metrics)
    conn = cast(Connection, exchange.conn)
    exchange.on_client_gone()
    assert conn.abandoned and responder.aborted
    assert (admission.in_use, worker.inflight, stats.by_status, metrics.outcomes) == (
        0,
        0,
        {499: 1},
        ["client_gone"],
    )


@pytest.mark.parametrize("broken", ["metrics", "answer"])
def test_a_bug_in_a_callback_answers_500_and_leaks_nothing(broken: str) -> None:
    """A callback that raises answers 500 internal_error and still returns the slot and in-flight count once."""
    exchange, responder, admission, worker, _ = _exchange(Metrics(broken=broken == "metrics"))
    exchange.on_response(cast(Any, Response(status=1000 if broken == "answer" else 200)))
    if broken == "answer":
        assert responder.answer is not None and responder.answer[0] == 500
        assert responder.answer[1][-1] == (b"x-router-error-code", b"internal_error")
    else:  # the answer went out before the bug: nothing more to send
        assert responder.answer is not None and responder.answer[0] == 200
    assert (admission.in_use, worker.inflight, worker.work) == (0, 0, 0)
