"""The access log's line encoder and its bounded buffer (``dataplane.router.access_log``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dataplane.http import Responder
from dataplane.router.access_log import AccessLine, AccessLog, encode_lines
from dataplane.router.state import RouterState


def test_lines_are_json_objects_in_field_order_one_per_line() -> None:
    """Each entry is one newline-terminated JSON object, fields in order, None as null."""
    data = encode_lines(
        [
            AccessLine(
                1700000000.5, "/v1/chat/completions", "POST", 200, None, 0.012346, "team-a", "http://w:1", 3
            ),
            AccessLine(1700000001.0, "other", None, 404, "route_not_found", 0.0, None, None, -1),
        ]
    )
    assert data.endswith(b"\n")
    lines = data.decode().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == [
        "time",
        "route",
        "method",
        "status",
        "code",
        "duration_s",
        "client",
        "worker",
        "revision",
    ]
    assert first == {
        "time": 1700000000.5,
        "route": "/v1/chat/completions",
        "method": "POST",
        "status": 200,
        "code": None,
        "duration_s": 0.012346,
        "client": "team-a",
        "worker": "http://w:1",
        "revision": 3,
    }
    assert json.loads(lines[1])["method"] is None
    assert json.loads(lines[1])["code"] == "route_not_found"


def test_a_route_with_quotes_stays_valid_json() -> None:
    """Values are escaped by the encoder, not pasted into a template."""
    data = encode_lines([AccessLine(0.0, '/a"b\\c', "GET", 404, "route_not_found", 0.0, None, None, 0)])
    assert json.loads(data)["route"] == '/a"b\\c'


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
    responder = Responder()
    responder.method = method
    log.record("other", 404, 0.001, responder)
    [line] = log.entries
    assert line.method == logged


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
        assert log.entries == []
    finally:
        await log.stop()
