"""engine-sim as a process, driven as an engine integrator would (SPEC §1, §2, §7).

Its HTTP surface over HTTP/1.1 (urllib, the official ``openai`` client) and h2c (prior
knowledge, by hand); what it read, from ``x-sim-sampling-params``; its 422 bodies against
pydantic's own errors for the engine's field types; its load on the wire, decoded by our own
SUB sockets, while requests run and after; and SIGTERM.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Optional

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from tests.fakes.h2c import h2c_request
from tests.fakes.load_reader import LoadReader
from tests.fakes.sim_process import Sim, free_ports, port_free, until

openai = pytest.importorskip("openai")

CHAT = {"model": "sim-audit", "messages": [{"role": "user", "content": "hello there"}]}


def post(sim: Sim, path: str, body: Any, protocol: str = "h1") -> tuple[int, dict[str, str], Any]:
    """POST JSON (``body`` may be raw bytes) over h1 or h2c; ``(status, headers, decoded body)``."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    if protocol == "h2c":
        reply = h2c_request("127.0.0.1", sim.port, "POST", path, raw)
        return reply.status, reply.headers, json.loads(reply.body) if reply.body else None
    request = urllib.request.Request(
        sim.url + path, data=raw, method="POST", headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, json.loads(err.read())


def get(sim: Sim, path: str, protocol: str) -> tuple[int, bytes]:
    if protocol == "h2c":
        reply = h2c_request("127.0.0.1", sim.port, "GET", path)
        return reply.status, reply.body
    with urllib.request.urlopen(sim.url + path, timeout=10) as resp:
        return resp.status, resp.read()


# -- HTTP surface -------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "protocol"), [(None, "h1"), ("--http2", "h2c"), ("--enable-http2", "h2c")])
def test_get_surface(flag: str | None, protocol: str) -> None:
    """/server_info, /v1/models and /health answer over the protocol the engine advertises."""
    flags = ["--model", "sim-audit", "--dp-size", "2", "--max-total-tokens", "5000"]
    with Sim(*flags, *([flag] if flag else [])) as sim:
        status, body = get(sim, "/server_info", protocol)
        info = json.loads(body)
        assert status == 200
        assert info["enable_http2"] is (flag is not None)
        assert info["dp_size"] == 2 and info["max_total_num_tokens"] == 5000
        assert info["port"] == sim.port  # the bound port, not the 0 it was asked for
        assert os.path.isdir(info["model_path"])  # a local path, never a hub name
        status, body = get(sim, "/v1/models", protocol)
        models = json.loads(body)
        assert status == 200 and models["object"] == "list"
        assert [m["id"] for m in models["data"]] == ["sim-audit"]
        status, _ = get(sim, "/health", protocol)
        assert status == 200


def test_openai_client_and_what_the_engine_read() -> None:
    """chat and completions through the openai client; x-sim-sampling-params is what the engine read."""
    with Sim("--model", "sim-audit", "--decode-tokens-per-s", "0") as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="sim-audit",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=3,
                temperature=0.5,
                extra_body={"top_k": "3", "min_p": "0.1", "repetition_penalty": True},
            )
            read = json.loads(raw.headers["x-sim-sampling-params"])
            assert list(read) == [
                "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                "frequency_penalty", "presence_penalty", "n",
            ]  # fmt: skip
            assert read == {
                "temperature": 0.5, "top_p": None, "top_k": 3, "min_p": 0.1, "repetition_penalty": 1.0,
                "frequency_penalty": 0.0, "presence_penalty": 0.0, "n": 1,
            }  # fmt: skip
            chat = raw.parse()
            assert chat.choices[0].message.content is not None
            assert chat.usage is not None and chat.usage.completion_tokens == 3
            raw = client.completions.with_raw_response.create(model="sim-audit", prompt="x", max_tokens=2)
            read = json.loads(raw.headers["x-sim-sampling-params"])
            # /v1/completions has non-Optional defaults for every field (reference A.1).
            assert read == {
                "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                "frequency_penalty": 0.0, "presence_penalty": 0.0, "n": 1,
            }  # fmt: skip
            assert raw.parse().choices[0].text.split() == ["sim", "lorem"]
            stream = client.chat.completions.create(
                model="sim-audit", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
            )
            assert len("".join(c.choices[0].delta.content or "" for c in stream if c.choices).split()) == 4
        finally:
            client.close()


@pytest.mark.parametrize("protocol", ["h1", "h2c"])
def test_generate_and_last_key_wins(protocol: str) -> None:
    """/generate reads sampling_params; a repeated key reads as its last value, as json.loads does."""
    with Sim("--http2", "--decode-tokens-per-s", "0") as sim:
        body = b'{"text": "hi", "sampling_params": {"temperature": 2, "temperature": "0.25", "max_new_tokens": 3}}'
        status, headers, answer = post(sim, "/generate", body, protocol)
        assert status == 200, answer
        assert json.loads(headers["x-sim-sampling-params"])["temperature"] == 0.25
        assert answer["meta_info"]["completion_tokens"] == 3 and len(answer["text"].split()) == 3
        body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 3, "n": true}'
        status, headers, answer = post(sim, "/v1/chat/completions", body, protocol)
        assert status == 200 and json.loads(headers["x-sim-sampling-params"])["n"] == 1
        assert len(answer["choices"]) == 1


class EngineChat(BaseModel):
    """SPEC §2's engine types for /v1/chat/completions, written here from the table."""

    model_config = ConfigDict(extra="ignore")
    messages: list[dict[str, Any]]
    temperature: Optional[float] = None  # noqa: UP045 - the engine's spelling
    top_p: Optional[float] = None  # noqa: UP045
    top_k: Optional[int] = None  # noqa: UP045
    min_p: Optional[float] = None  # noqa: UP045
    repetition_penalty: Optional[float] = None  # noqa: UP045
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1


def pydantic_detail(body: dict[str, Any]) -> list[dict[str, Any]]:
    """What FastAPI would answer: pydantic's errors with ``body`` in front of each location."""
    with pytest.raises(ValidationError) as caught:
        EngineChat.model_validate(body)
    return [
        {**{k: v for k, v in e.items() if k != "url"}, "loc": ["body", *e["loc"]]}
        for e in json.loads(caught.value.json(include_url=False))
    ]


BAD_SAMPLING = [
    {"temperature": "abc"},
    {"temperature": [0.5]},
    {"top_p": {"v": 1}},
    {"top_k": 1.5},
    {"top_k": "1e5"},
    {"top_k": "0.5"},
    {"min_p": "1__0"},
    {"frequency_penalty": None},
    {"presence_penalty": "x"},
    {"n": "two"},
    {"n": 2.5},
    {"temperature": "nope", "n": 1.5, "top_k": "x"},
]


@pytest.mark.parametrize("protocol", ["h1", "h2c"])
@pytest.mark.parametrize("bad", BAD_SAMPLING, ids=[json.dumps(b) for b in BAD_SAMPLING])
def test_422_bodies_are_pydantics(sim_h2: Sim, protocol: str, bad: dict[str, Any]) -> None:
    """A sampling value the engine's types refuse is 422 with exactly pydantic's errors (FastAPI shape)."""
    body = {**CHAT, **bad}
    status, _headers, answer = post(sim_h2, "/v1/chat/completions", body, protocol)
    assert status == 422
    assert answer == {"detail": pydantic_detail(body)}


def test_422_for_a_literal_beyond_float_range(sim_h2: Sim) -> None:
    """SGLang 0.5.23 parses bodies with orjson, which refuses 1e400 (json.loads would read inf):
    FastAPI's json_invalid 422, at the number's offset, with orjson's reason."""
    status, _headers, answer = post(sim_h2, "/v1/chat/completions", b'{"messages": [], "n": 1e400}')
    assert status == 422
    (got,) = answer["detail"]
    assert got["type"] == "json_invalid" and got["loc"] == ["body", 22]
    assert got["ctx"] == {"error": "number is infinity when parsed as double"}


@pytest.fixture(scope="module")
def sim_h2() -> Any:
    with Sim("--http2", "--decode-tokens-per-s", "0") as sim:
        yield sim


# -- load on the wire ----------------------------------------------------------------------------


def auto_sim(dp: int, *flags: str, console_script: bool = False) -> tuple[Sim, int]:
    kv = free_ports(2 * dp)
    sim = Sim(
        "--dp-size", str(dp), "--load-publish-endpoint", "auto", "--kv-events-endpoint", f"tcp://*:{kv}", *flags,
        console_script=console_script,
    )  # fmt: skip
    return sim, kv + dp


def test_idle_ranks_heartbeat_with_their_rank(readers: Callable[[list[str]], LoadReader]) -> None:
    """dp-size 2, idle: each rank publishes [0, 0, 0, capacity, rank, 0, 0, limit, 0, 0] about once a
    second (SGLang 0.5.23's eleven positions), seq +1 each."""
    sim, base = auto_sim(2, "--max-total-tokens", "4321")
    with sim:
        info = sim.get("/server_info")
        assert info["kv_events"]["load_endpoint_port_base"] == base
        reader = readers([f"tcp://127.0.0.1:{base}", f"tcp://127.0.0.1:{base + 1}"])
        assert reader.wait(lambda: all(len(f) >= 3 for f in reader.frames.values()), 10.0), reader.frames
    for rank in (0, 1):
        frames = reader.frames[rank]
        assert all(f.stat == ["LoadStat", 0, 0, 0, 4321, rank, 0, 0, 256, 0, 0] for f in frames), frames
        seqs = [f.seq for f in frames]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        gaps = [b.at - a.at for a, b in itertools.pairwise(frames)]
        # Once per second: not a stream of frames (0.7: a loaded box delays some arrivals), nor much slower.
        assert all(0.7 <= g <= 2.0 for g in gaps), gaps


def chat_h2c(sim: Sim, body: dict[str, Any]) -> tuple[int, Any]:
    status, _, answer = post(sim, "/v1/chat/completions", body, "h2c")
    return status, answer


@pytest.mark.parametrize("protocol", ["h1", "h2c"])
def test_load_follows_requests_and_returns_to_idle(
    protocol: str, readers: Callable[[list[str]], LoadReader]
) -> None:
    """4 slow requests on 2 ranks with 1 running slot each: running 1 + waiting 1 per rank, then 0."""
    flags = ["--max-running-requests", "1", "--decode-tokens-per-s", "20", "--max-total-tokens", "1000"]
    if protocol == "h2c":
        flags.append("--http2")
    sim, base = auto_sim(2, *flags)
    with sim:
        reader = readers([f"tcp://127.0.0.1:{base}", f"tcp://127.0.0.1:{base + 1}"])
        assert reader.wait(lambda: all(reader.frames.values()), 10.0)
        results: list[Any] = []

        def one() -> None:
            if protocol == "h2c":
                results.append(chat_h2c(sim, {**CHAT, "max_tokens": 10}))
                return
            client = openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0, timeout=30)
            try:
                reply = client.chat.completions.create(
                    model="sim-audit", messages=[{"role": "user", "content": "hello there"}], max_tokens=10
                )
                results.append((200, reply.usage.completion_tokens if reply.usage else None))
            finally:
                client.close()

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        peak: dict[int, tuple[int, int, int]] = {0: (0, 0, 0), 1: (0, 0, 0)}

        def busy_seen() -> bool:
            for rank in (0, 1):
                stat = reader.latest(rank)
                if stat is not None:
                    running, waiting, tokens = stat[1], stat[2], stat[3]
                    assert running <= 1 and 0 <= tokens <= 1000, stat
                    peak[rank] = max(peak[rank], (running, waiting, tokens))
            return all(p[0] == 1 and p[1] >= 1 and p[2] > 0 for p in peak.values())

        assert reader.wait(busy_seen, 15.0), peak
        for t in threads:
            t.join(30)
        assert len(results) == 4
        if protocol == "h1":
            assert results == [(200, 10)] * 4
        else:
            assert all(s == 200 and a["usage"]["completion_tokens"] == 10 for s, a in results), results
        # Idle again: the last frame of each rank says nothing runs, waits or holds KV tokens.
        assert reader.wait(
            lambda: all((reader.latest(r) or [None] * 4)[1:4] == [0, 0, 0] for r in (0, 1)), 5.0
        ), [reader.latest(r) for r in (0, 1)]
        for rank in (0, 1):
            seqs = [f.seq for f in reader.frames[rank]]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            assert all(f.stat[5] == rank and f.stat[4] == 1000 for f in reader.frames[rank])


# -- stopping ----------------------------------------------------------------------------------


def test_sigterm_with_a_request_in_flight_stops_promptly_and_frees_every_port() -> None:
    """`fleetplane engine-sim`, SIGTERM: exit 0 within seconds although a request would run for minutes; ports free."""
    sim, base = auto_sim(2, "--decode-tokens-per-s", "1", console_script=True)
    kv = base - 2
    with sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0, timeout=30)
        caught: list[BaseException] = []

        def long_request() -> None:
            try:
                client.chat.completions.create(
                    model="sim-audit", messages=[{"role": "user", "content": "x"}], max_tokens=500
                )
            except BaseException as exc:  # the request is cut short by the shutdown
                caught.append(exc)

        worker = threading.Thread(target=long_request)
        worker.start()
        assert until(lambda: '"num_reqs": 1' in json.dumps(sim.get("/get_load")), 10.0)
        started = time.monotonic()
        os.kill(sim.pid, signal.SIGTERM)
        assert sim.proc is not None
        assert sim.proc.wait(10) == 0
        took = time.monotonic() - started
        assert took < 5.0, took
        worker.join(10)
        client.close()
        assert caught, "the in-flight request did not end with the process"
        ports = [sim.port, kv, kv + 1, base, base + 1]
        assert until(lambda: all(port_free(p) for p in ports), 5.0), [p for p in ports if not port_free(p)]


@pytest.mark.parametrize("stream", [False, True])
def test_h2c_stream_reset_frees_the_slot_on_the_wire(
    stream: bool, readers: Callable[[list[str]], LoadReader]
) -> None:
    """A router cancelling one h2c stream (RST_STREAM, connection kept): the rank's load drops to 0."""
    sim, base = auto_sim(1, "--http2", "--decode-tokens-per-s", "10")
    with sim:
        reader = readers([f"tcp://127.0.0.1:{base}"])
        assert reader.wait(lambda: bool(reader.frames[0]), 10.0)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
            conn.initiate_connection()
            body = json.dumps({**CHAT, "max_tokens": 100, "stream": stream}).encode()
            conn.send_headers(
                1,
                [
                    (":method", "POST"), (":path", "/v1/chat/completions"), (":scheme", "http"),
                    (":authority", "audit"), ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                ],
            )  # fmt: skip
            conn.send_data(1, body, end_stream=True)
            sock.sendall(conn.data_to_send())
            assert reader.wait(lambda: (reader.latest(0) or [None, 0])[1] == 1, 10.0), reader.latest(0)
            conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
            sock.sendall(conn.data_to_send())
            assert reader.wait(lambda: (reader.latest(0) or [None] * 4)[1:4] == [0, 0, 0], 5.0), (
                reader.latest(0)
            )
            # The connection still serves: a new stream on it is answered.
            conn.send_headers(
                3, [(":method", "GET"), (":path", "/health"), (":scheme", "http"), (":authority", "audit")],
                end_stream=True,
            )  # fmt: skip
            sock.sendall(conn.data_to_send())
            status = None
            deadline = time.monotonic() + 10
            while status is None and time.monotonic() < deadline:
                for event in conn.receive_data(sock.recv(65536)):
                    if isinstance(event, h2.events.ResponseReceived) and event.stream_id == 3:
                        status = dict(event.headers)[b":status"]
                sock.sendall(conn.data_to_send())
            assert status == b"200"


class EngineCompletion(BaseModel):
    """/v1/completions as reference A.1 types it: every sampling field non-Optional with a default."""

    model_config = ConfigDict(extra="ignore")
    prompt: str
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1


@pytest.mark.parametrize(
    "bad", [{"temperature": None}, {"top_k": None, "top_p": "x"}, {"n": "1.5"}, {"min_p": [0]}], ids=str
)
def test_completions_422_bodies_are_pydantics(sim_h2: Sim, bad: dict[str, Any]) -> None:
    """/v1/completions refuses null for its non-Optional fields, with pydantic's exact errors."""
    body = {"prompt": "hi", **bad}
    status, _headers, answer = post(sim_h2, "/v1/completions", body)
    assert status == 422
    with pytest.raises(ValidationError) as caught:
        EngineCompletion.model_validate(body)
    want = [{**e, "loc": ["body", *e["loc"]]} for e in json.loads(caught.value.json(include_url=False))]
    assert answer == {"detail": want}
