"""The access log's line encoder and its bounded buffer (``dataplane.router.access_log``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dataplane.http import Responder
from dataplane.router import access_log
from dataplane.router.access_log import AccessLog, encode_lines
from dataplane.router.state import RouterState

FIELDS = ["time", "route", "method", "status", "code", "duration_s", "client", "worker", "revision"]


def _responder(
    method: bytes = b"POST", code: str | None = None, client: str | None = None, worker: str | None = None
) -> Responder:
    responder = Responder()
    responder.method = method
    responder.error_code = code
    responder.client_name = client
    responder.upstream = worker
    return responder


def _lines(log: AccessLog) -> list[dict[str, object]]:
    """What a flush of ``log`` would write, one parsed object per line."""
    data = encode_lines(log.numbers, log.shapes)
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


def test_lines_are_json_objects_in_field_order_one_per_line() -> None:
    """Each answer is one newline-terminated JSON object, fields in order, None as null."""
    log = AccessLog(os.devnull, RouterState.standalone(None))
    before = time.time()
    log.record("/v1/chat/completions", 200, 0.012346, _responder(client="team-a", worker="http://w:1"))
    log.record("other", 404, 1e-7, _responder(b"GET", code="route_not_found"))
    log.record("/v1/chat/completions", 413, 0.5, None)
    after = time.time()
    first, second, third = _lines(log)
    assert [list(line) for line in (first, second, third)] == [FIELDS] * 3
    assert isinstance(first["time"], float) and before <= first["time"] <= after
    assert {k: v for k, v in first.items() if k != "time"} == {
        "route": "/v1/chat/completions",
        "method": "POST",
        "status": 200,
        "code": None,
        "duration_s": 0.012346,
        "client": "team-a",
        "worker": "http://w:1",
        "revision": 0,
    }
    assert (second["method"], second["status"], second["code"], second["duration_s"]) == (
        "GET",
        404,
        "route_not_found",
        1e-7,
    )
    assert (second["client"], second["worker"]) == (None, None)
    assert (third["method"], third["status"], third["code"], third["worker"]) == (None, 413, None, None)


def test_each_line_has_its_own_fields_when_the_others_repeat() -> None:
    """Lines through one worker that differ in any one field each carry their own value: the
    pre-encoded parts are reused only when every field matches."""
    log = AccessLog(os.devnull, RouterState.standalone(None))
    w1, w2 = "http://w:1", "http://w:2"
    answers = [
        ("/v1/chat/completions", 200, _responder(worker=w1)),
        ("/v1/chat/completions", 200, _responder(worker=w2)),
        ("/v1/chat/completions", 200, _responder(worker=w1)),
        ("/v1/completions", 200, _responder(worker=w1)),
        ("/v1/completions", 503, _responder(worker=w1)),
        ("/v1/completions", 502, _responder(worker=w1, code="upstream_unreachable")),
        ("/v1/completions", 502, _responder(worker=w1, code="upstream_timeout")),
        ("/v1/completions", 502, _responder(b"PUT", worker=w1, code="upstream_timeout")),
        ("/v1/completions", 502, _responder(b"PUT", worker=w1, code="upstream_timeout", client="a")),
        ("/v1/completions", 502, _responder(b"PUT", worker=w1, code="upstream_timeout", client="b")),
        ("/v1/completions", 502, _responder(b"PUT", worker=w2, code="upstream_timeout", client="b")),
    ]
    for i, (route, status, responder) in enumerate(answers):
        log.record(route, status, i / 8, responder)
    lines = _lines(log)
    seen = [
        (x["route"], x["status"], x["method"], x["code"], x["client"], x["worker"], x["duration_s"])
        for x in lines
    ]
    want = [
        (route, status, r.method.decode(), r.error_code, r.client_name, r.upstream, i / 8)
        for i, (route, status, r) in enumerate(answers)
    ]
    assert seen == want


def test_a_new_contract_revision_shows_on_the_next_line() -> None:
    """The revision is read per answer, not kept from the first line of a worker."""
    state = RouterState.standalone(None)
    log = AccessLog(os.devnull, state)
    log.record("other", 404, 0.0, _responder())
    state.apply_contracts(4, {})
    log.record("other", 404, 0.0, _responder())
    state.apply_contracts(5, {})
    log.record("other", 404, 0.0, _responder())
    assert [x["revision"] for x in _lines(log)] == [0, 4, 5]


@pytest.mark.parametrize(
    "text",
    ['/a"b\\c', "/caf\u00e9/\u2603", "/tab\there", "/nul\x00/\x1f", "/line\nbreak", "/\U0001f600"],
)
def test_strings_are_escaped_by_the_encoder_not_pasted(text: str) -> None:
    """Quotes, backslashes, control characters and non-ASCII in any string field stay valid JSON
    and read back as they were."""
    log = AccessLog(os.devnull, RouterState.standalone(None))
    log.record(text, 404, 0.0, _responder(client=text, worker=text, code=text))
    [line] = _lines(log)
    assert (line["route"], line["client"], line["worker"], line["code"]) == (text, text, text, text)


def test_many_distinct_lines_stay_exact_and_the_cache_bounded() -> None:
    """Past the cap of kept shapes, the cache starts over and every line is still its own."""
    log = AccessLog(os.devnull, RouterState.standalone(None))
    count = access_log._MAX_SHAPES * 2 + 7
    for i in range(count):
        log.record("other", 404, 0.0, _responder(client=f"client-{i}", worker=f"http://w:{i % 3}"))
        assert len(log._known) <= access_log._MAX_SHAPES
    lines = [(x["client"], x["worker"]) for x in _lines(log)]
    assert lines == [(f"client-{i}", f"http://w:{i % 3}") for i in range(count)]


@pytest.mark.parametrize(
    ("method", "logged"),
    [
        (b"POST", "POST"),
        (b"GET", "GET"),
        (b"PUT", "PUT"),
        (b"HEAD", "HEAD"),
        (b"M-SEARCH", "M-SEARCH"),
        (b"", None),
    ],
)
def test_the_method_is_the_requests_and_null_before_one_was_read(method: bytes, logged: str | None) -> None:
    """A line names the request's method as sent, and null when the answer came before one was read."""
    log = AccessLog(os.devnull, RouterState.standalone(None))
    log.record("other", 404, 0.001, _responder(method))
    [line] = _lines(log)
    assert line["method"] == logged


async def test_a_full_buffer_drops_and_counts(tmp_path: Path) -> None:
    """Past the cap, lines are dropped and counted; a flush writes the kept ones in one batch."""
    sink = tmp_path / "access.jsonl"
    log = AccessLog(str(sink), RouterState.standalone(None), max_buffered=3)
    log.start()
    try:
        for _ in range(5):
            log.record("other", 404, 0.001, None)
        assert log.dropped == 2
    finally:
        await log.stop()
    lines = [json.loads(x) for x in sink.read_text().splitlines()]
    assert [(x["route"], x["status"], x["revision"]) for x in lines] == [("other", 404, 0)] * 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full not available")
async def test_a_failing_sink_counts_the_batch_as_dropped() -> None:
    """A write the sink refuses (here: /dev/full, ENOSPC) loses the batch, counted, without raising."""
    log = AccessLog("/dev/full", RouterState.standalone(None))
    log.start()
    try:
        log.record("other", 404, 0.001, None)
        log.record("other", 404, 0.001, None)
        log.flush()
        assert log.dropped == 2
        assert log.shapes == []
    finally:
        await log.stop()
