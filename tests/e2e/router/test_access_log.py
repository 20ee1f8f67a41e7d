"""``--access-log``: one JSON line per request from a real router in front of engine-sim."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.fakes.cli import fleetplane
from tests.fakes.engine_sim import EngineSim
from tests.fakes.raw_http import CONTRACT, MODEL, request
from tests.fakes.router import RouterProcess, series

CHAT = "/v1/chat/completions"
KEYS = {"team-a": {"key": "sk-team-a-0123456789abcdef"}}
FIELDS = {"time", "route", "method", "status", "code", "duration_s", "client", "worker", "revision"}


def _chat(temperature: float) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "temperature": temperature,
        }
    ).encode()


def _lines(path: Path, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The log's lines once there are at least ``count`` (written in batches about every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = path.read_text() if path.exists() else ""
        lines = [json.loads(line) for line in text.splitlines()]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.fixture(scope="module")
def logged(sim: EngineSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RouterProcess, Path]]:
    log = tmp_path_factory.mktemp("access") / "access.jsonl"
    with RouterProcess(
        "--worker", sim.url, "--override-sampling-params", CONTRACT, "--access-log", str(log)
    ) as r:
        yield r, log


def _line_of(path: Path, before: int, route: str) -> dict[str, Any]:
    lines = _lines(path, before + 1)
    assert len(lines) == before + 1, lines[before:]
    line = lines[before]
    assert set(line) == FIELDS
    assert line["route"] == route
    return line


def test_an_accepted_request_is_one_line_with_its_worker(
    logged: tuple[RouterProcess, Path], sim: EngineSim
) -> None:
    """A served chat: route, method, 200, no code, its duration, the worker's URL, revision 0."""
    router, log = logged
    before = len(_lines(log, 0, 0))
    assert request(router, "POST", CHAT, _chat(0.5), "Content-Type: application/json\r\n").status == 200
    line = _line_of(log, before, CHAT)
    assert (line["method"], line["status"], line["code"]) == ("POST", 200, None)
    assert line["worker"] == sim.url
    assert line["client"] is None
    assert line["revision"] == 0
    assert 0 < line["duration_s"] < 10
    assert abs(line["time"] - time.time()) < 30


def test_a_contract_refusal_carries_its_error_code(logged: tuple[RouterProcess, Path]) -> None:
    """A 400 by the contract: its x-router-error-code, and no worker (none was chosen)."""
    router, log = logged
    before = len(_lines(log, 0, 0))
    answer = request(router, "POST", CHAT, _chat(0.9), "Content-Type: application/json\r\n")
    assert answer.status == 400
    line = _line_of(log, before, CHAT)
    assert (line["status"], line["code"], line["worker"]) == (
        400,
        answer.headers["x-router-error-code"],
        None,
    )
    assert line["code"] == "sampling_contract_violation"


def test_an_unknown_path_is_404_route_not_found(logged: tuple[RouterProcess, Path]) -> None:
    """Default-deny: counted under route ``other`` with code route_not_found."""
    router, log = logged
    before = len(_lines(log, 0, 0))
    assert request(router, "GET", "/no/such/path").status == 404
    line = _line_of(log, before, "other")
    assert (line["method"], line["status"], line["code"]) == ("GET", 404, "route_not_found")


def test_an_h2c_request_is_logged_like_http1(logged: tuple[RouterProcess, Path], sim: EngineSim) -> None:
    """A request over h2c (prior knowledge) makes the same line: route, method, status, worker."""
    router, log = logged
    before = len(_lines(log, 0, 0))
    with httpx2.Client(http1=False, http2=True, base_url=router.url, timeout=10) as client:
        got = client.post(CHAT, content=_chat(0.5), headers={"content-type": "application/json"})
    assert (got.http_version, got.status_code) == ("HTTP/2", 200)
    line = _line_of(log, before, CHAT)
    assert (line["method"], line["status"], line["worker"]) == ("POST", 200, sim.url)


def test_nothing_is_dropped_under_light_load(logged: tuple[RouterProcess, Path]) -> None:
    """The dropped-lines counter exists and stays 0 when the sink keeps up."""
    router, _ = logged
    assert router.metrics()[series("fleetplane_access_log_dropped_total")] == 0


def test_the_client_name_of_an_api_key(sim: EngineSim, tmp_path: Path) -> None:
    """With --api-keys: the key's name is the line's client; a refused key is 401 with no client."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    log = tmp_path / "access.jsonl"
    with RouterProcess("--worker", sim.url, "--api-keys", str(keys), "--access-log", str(log)) as router:
        auth = f"Authorization: Bearer {KEYS['team-a']['key']}\r\nContent-Type: application/json\r\n"
        assert request(router, "POST", CHAT, _chat(0.5), auth).status == 200
        assert request(router, "GET", "/v1/models", None, "Authorization: Bearer sk-wrong\r\n").status == 401
        lines = _lines(log, 2)
    assert [(x["route"], x["status"], x["client"], x["code"]) for x in lines] == [
        (CHAT, 200, "team-a", None),
        ("/v1/models", 401, None, "invalid_api_key"),
    ]
    assert KEYS["team-a"]["key"] not in log.read_text()


def test_off_writes_nothing_per_request(sim: EngineSim, tmp_path: Path) -> None:
    """``--access-log off`` (the default): requests leave no line on the router's output."""
    with RouterProcess("--worker", sim.url, "--access-log", "off") as router:
        for _ in range(3):
            assert request(router, "GET", "/v1/models").status == 200
        assert request(router, "GET", "/no/such/path").status == 404
        time.sleep(1.0)  # more than a flush interval: a line would have been written by now
        metrics = router.metrics()
        output = "\n".join(router.output)
    assert series("fleetplane_access_log_dropped_total") not in metrics
    assert '"route"' not in output
    assert "/no/such/path" not in output


def test_stderr_gets_the_lines_among_the_router_logs(sim: EngineSim) -> None:
    """``--access-log stderr``: the lines come out on the router's stderr, one JSON object each."""
    with RouterProcess("--worker", sim.url, "--access-log", "stderr") as router:
        assert request(router, "GET", "/no/such/path").status == 404
        deadline = time.monotonic() + 10
        found: list[dict[str, Any]] = []
        while not found and time.monotonic() < deadline:
            found = [json.loads(x) for x in router.output if x.startswith("{") and '"route"' in x]
            time.sleep(0.05)
    assert [(x["route"], x["status"], x["code"]) for x in found] == [("other", 404, "route_not_found")]


def test_a_sink_that_cannot_be_opened_stops_the_router_with_one_line(sim: EngineSim, tmp_path: Path) -> None:
    """A FILE in a missing directory: exit 2 and one line naming the flag, the path and why."""
    missing = tmp_path / "no-such-dir" / "access.jsonl"
    done = fleetplane("router", "--listen", "127.0.0.1:0", "--worker", sim.url, "--access-log", str(missing))
    assert done.returncode == 2
    assert f"--access-log '{missing}': No such file or directory" in done.stderr, done.stderr
