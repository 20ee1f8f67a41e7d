"""engine-sim's HTTP surface over HTTP/1.1 and h2c: shapes, what the engine read, errors, streaming."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.fakes.sim_http import Http

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello world, how are you"}]}
DEFAULTS_CHAT = {
    "temperature": None,
    "top_p": None,
    "top_k": None,
    "min_p": None,
    "repetition_penalty": None,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "n": 1,
}


async def test_chat_completion_shape_and_usage(make_sim: Any, protocol: str) -> None:
    """A chat answer has the OpenAI shape, max_tokens words of text, usage and finish_reason length."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", {**CHAT, "max_tokens": 5})
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["object"] == "chat.completion" and body["model"] == "m"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and len(choice["message"]["content"].split()) == 5
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11}


async def test_unset_optional_fields_read_as_null(make_sim: Any, protocol: str) -> None:
    """Omitted chat sampling fields are read as None (Optional) or their plain defaults."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", CHAT)
    assert reply.sampling == DEFAULTS_CHAT
    assert reply.json()["choices"][0]["finish_reason"] == "stop"
    assert reply.json()["usage"]["completion_tokens"] == 16


async def test_last_key_wins_and_lax_coercion(make_sim: Any, protocol: str) -> None:
    """The engine reads the last repeated key and coerces strings and bools like pydantic lax mode."""
    sim = await make_sim()
    raw = (
        b'{"messages":[{"role":"user","content":"x"}],"temperature":2,"temperature":"0.25",'
        b'"top_k":" 1_0 ","min_p":true,"n":"1.0","frequency_penalty":"1_0e-1","top_p":null}'
    )
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", raw=raw)
    assert reply.status == 200
    assert reply.sampling == {
        **DEFAULTS_CHAT,
        "temperature": 0.25,
        "top_k": 10,
        "min_p": 1.0,
        "n": 1,
        "frequency_penalty": 1.0,
    }


async def test_completions_read_non_optional_defaults(make_sim: Any, protocol: str) -> None:
    """/v1/completions reads every sampling field with its plain default."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/completions", {"prompt": "abcdefgh", "max_tokens": 3, "top_k": 40})
    assert reply.status == 200
    assert reply.sampling == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 40,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "n": 1,
    }
    body = reply.json()
    assert body["object"] == "text_completion" and len(body["choices"][0]["text"].split()) == 3
    assert body["usage"]["prompt_tokens"] == 2


async def test_generate_reads_sampling_params(make_sim: Any, protocol: str) -> None:
    """/generate reads sampling_params with SamplingParams' defaults (top_k = 1 << 30)."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post(
            "/generate", {"text": "hi", "sampling_params": {"temperature": "0.5", "max_new_tokens": 4}}
        )
        bare = await http.post("/generate", {"input_ids": [1, 2, 3]})
    assert reply.status == 200 and reply.sampling["temperature"] == 0.5
    assert reply.sampling["top_k"] == 1 << 30
    body = reply.json()
    assert len(body["text"].split()) == 4
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert bare.status == 200 and bare.json()["meta_info"]["prompt_tokens"] == 3


async def test_invalid_body_is_422_with_pydantic_detail(make_sim: Any, protocol: str) -> None:
    """Type errors answer 422 with FastAPI's detail list naming each field under body."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", {"messages": [], "top_k": "1e0", "n": 1.5})
        missing = await http.post("/v1/chat/completions", {"model": "m"})
        not_json = await http.post("/v1/chat/completions", raw=b'{"messages": [')
    assert reply.status == 422 and "x-sim-sampling-params" not in reply.headers
    detail = {tuple(d["loc"]): d["type"] for d in reply.json()["detail"]}
    assert detail == {("body", "top_k"): "int_parsing", ("body", "n"): "int_from_float"}
    assert missing.status == 422 and missing.json()["detail"][0]["loc"] == ["body", "messages"]
    assert not_json.status == 422 and not_json.json()["detail"][0]["type"] == "json_invalid"


async def test_values_outside_engine_domain_are_400(make_sim: Any, protocol: str) -> None:
    """SamplingParams.verify failures answer SGLang's 400 error, still saying what was read."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", {**CHAT, "top_p": 0})
        gen = await http.post("/generate", {"text": "x", "sampling_params": {"top_k": 0}})
        empty = await http.post("/generate", {"sampling_params": {}})
    assert reply.status == 400 and reply.json()["object"] == "error"
    assert "top_p" in reply.json()["message"] and reply.sampling["top_p"] == 0.0
    assert gen.status == 400 and "top_k" in gen.json()["message"]
    assert empty.status == 400 and "input_ids" in empty.json()["message"]


async def test_request_larger_than_kv_pool_is_400(make_sim: Any, protocol: str) -> None:
    """A prompt plus max tokens beyond the KV pool is refused with 400."""
    sim = await make_sim("--max-total-tokens", "100")
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/completions", {"prompt": "x" * 400, "max_tokens": 10})
    assert reply.status == 400 and "KV pool" in reply.json()["message"]


async def test_chat_stream_events_end_with_done(make_sim: Any, protocol: str) -> None:
    """A chat stream sends role, one event per token, finish, usage, then data: [DONE]."""
    sim = await make_sim()
    body = {**CHAT, "stream": True, "max_tokens": 3, "stream_options": {"include_usage": True}}
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", body)
    assert reply.status == 200 and reply.headers["content-type"] == "text/event-stream"
    assert reply.sampling == DEFAULTS_CHAT
    events = reply.events()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"content": "", "role": "assistant"}
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:4]] == [" sim", " lorem", " ipsum"]
    assert chunks[4]["choices"][0]["finish_reason"] == "length"
    assert chunks[5]["choices"] == [] and chunks[5]["usage"]["completion_tokens"] == 3


async def test_completion_and_generate_streams(make_sim: Any, protocol: str) -> None:
    """Completion and /generate streams carry the tokens and end with data: [DONE]."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        comp = await http.post("/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True})
        gen = await http.post(
            "/generate", {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 2}}
        )
    assert comp.events()[-1] == "[DONE]" and gen.events()[-1] == "[DONE]"
    texts = [json.loads(e)["choices"][0]["text"] for e in comp.events()[:-1]]
    assert texts == [" sim", " lorem", ""]
    final = json.loads(gen.events()[-2])
    assert final["text"] == " sim lorem" and final["meta_info"]["finish_reason"]["type"] == "length"


async def test_stream_is_paced_by_the_decode_rate(make_sim: Any, protocol: str) -> None:
    """At 20 tokens/s, 6 tokens arrive over about 0.3 s, in several chunks, not all at once."""
    sim = await make_sim("--decode-tokens-per-s", "20")
    async with Http(sim.url, protocol) as http:
        start = asyncio.get_running_loop().time()
        reply = await http.post("/v1/completions", {"prompt": "x", "max_tokens": 6, "stream": True})
        elapsed = asyncio.get_running_loop().time() - start
    assert reply.events()[-1] == "[DONE]"
    assert 0.25 <= elapsed < 2.0
    assert len(reply.chunks) >= 4
    assert reply.chunks[-1][0] - reply.chunks[0][0] >= 0.2


async def test_get_endpoints(make_sim: Any, protocol: str) -> None:
    """/health, /v1/models, /get_model_info and /server_info answer; unknown paths 404, wrong method 405."""
    sim = await make_sim("--model", "my-model", "--http2", "--dp-size", "2")
    async with Http(sim.url, protocol) as http:
        health = await http.get("/health")
        models = await http.get("/v1/models")
        info = await http.get("/get_model_info")
        server = await http.get("/server_info?x=1")
        missing = await http.get("/nope")
        wrong = await http.get("/v1/chat/completions")
    assert health.status == 200
    assert models.json()["data"][0]["id"] == "my-model"
    assert info.json()["model_path"] == "/tmp/m"
    body = server.json()
    assert body["enable_http2"] is True and body["dp_size"] == 2
    assert body["kv_events"]["endpoint_port_base"] == 5557 and "load_topic" not in body["kv_events"]
    assert missing.status == 404 and wrong.status == 405


async def test_n_choices(make_sim: Any, protocol: str) -> None:
    """n > 1 returns n choices and counts n sequences of completion tokens."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/chat/completions", {**CHAT, "n": 3, "max_tokens": 2})
    body = reply.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["completion_tokens"] == 6


async def test_disconnected_stream_frees_its_slot(make_sim: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A client that drops a slow stream is aborted: its rank shows no running request after."""
    sim = await make_sim("--decode-tokens-per-s", "10")
    host, port = sim.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({**CHAT, "stream": True, "max_tokens": 100}).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    await reader.readuntil(b"data: ")
    assert sim.ranks[0].scheduler.counts()[0] == 1
    writer.close()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if sim.ranks[0].scheduler.counts()[0] == 0:
            break
    assert sim.ranks[0].scheduler.counts()[:3] == (0, 0, 0)
    # The handler ends its answer (aborted) rather than leaving the server to report a bug.
    assert not [rec for rec in caplog.records if rec.name.startswith("dataplane.http")]


async def test_disconnected_non_streaming_request_is_aborted(
    make_sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that gives up on a slow non-streaming answer frees its slot and KV tokens."""
    sim = await make_sim("--decode-tokens-per-s", "10")
    host, port = sim.url.removeprefix("http://").rsplit(":", 1)
    _reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({**CHAT, "max_tokens": 100}).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if sim.ranks[0].scheduler.counts()[0] == 1:
            break
    assert sim.ranks[0].scheduler.counts()[0] == 1
    writer.close()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if sim.ranks[0].scheduler.counts()[0] == 0:
            break
    assert sim.ranks[0].scheduler.counts()[:3] == (0, 0, 0)
    # The handler ends its answer (aborted) rather than leaving the server to report a bug.
    assert not [rec for rec in caplog.records if rec.name.startswith("dataplane.http")]


async def test_long_instant_stream_arrives_whole(make_sim: Any, protocol: str) -> None:
    """A 3000-token instant stream (sent in bounded batches, under flow control) arrives complete."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/completions", {"prompt": "x", "max_tokens": 3000, "stream": True})
    events = reply.events()
    assert events[-1] == "[DONE]" and len(events) == 3000 + 2
    assert json.loads(events[2999])["choices"][0]["text"] != ""


async def test_get_load_follows_the_schedulers(make_sim: Any, protocol: str) -> None:
    """GET /get_load reports each dp rank's requests and KV tokens, like SGLang's."""
    sim = await make_sim("--dp-size", "2", "--decode-tokens-per-s", "10")
    async with Http(sim.url, protocol) as http:
        idle = (await http.get("/get_load")).json()
        pending = asyncio.ensure_future(http.post("/v1/chat/completions", {**CHAT, "max_tokens": 3}))
        await asyncio.sleep(0.1)
        busy = (await http.get("/get_load")).json()
        await pending
        extra = [await http.get("/health_generate"), await http.post("/flush_cache")]
    assert idle == [
        {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0},
        {"dp_rank": 1, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0},
    ]
    assert sum(rank["num_reqs"] for rank in busy) == 1 and sum(rank["num_tokens"] for rank in busy) > 0
    assert [reply.status for reply in extra] == [200, 200]


async def test_many_short_paced_requests_all_complete(make_sim: Any, protocol: str) -> None:
    """Hundreds of concurrent 2-token requests at 400 tokens/s all get their answer (no lost wake-up)."""
    sim = await make_sim("--decode-tokens-per-s", "400", "--tick-ms", "1")
    async with Http(sim.url, protocol) as http:
        replies = await asyncio.wait_for(
            asyncio.gather(
                *(http.post("/v1/chat/completions", {**CHAT, "max_tokens": 2}) for _ in range(300))
            ),
            20,
        )
    assert [reply.status for reply in replies] == [200] * 300
