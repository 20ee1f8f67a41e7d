"""engine-sim answers every route SGLang 0.5.23 samples on, in its shapes (SPEC §5.1), h1 and h2c."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.fakes.sim_http import Http

MESSAGES = [{"role": "user", "content": "hello world, how are you"}]


def _sse_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of a named-event SSE stream."""
    out = []
    for record in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


# -- the official clients -------------------------------------------------------------------------
async def test_openai_responses_create_reads_the_sampling_fields(make_sim: Any) -> None:
    """openai's responses.create gets a Response object; the engine read its temperature/top_p."""
    sim = await make_sim()
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
    async with client:
        raw = await client.responses.with_raw_response.create(
            model="m", input="hello there", temperature=0.25, top_p=0.5, max_output_tokens=4
        )
    response = raw.parse()
    assert response.status == "incomplete" and response.output_text.split() == [
        "sim",
        "lorem",
        "ipsum",
        "dolor",
    ]
    assert response.usage is not None and response.usage.output_tokens == 4
    sampling = json.loads(raw.headers["x-sim-sampling-params"])
    assert sampling == {
        "temperature": 0.25,
        "top_p": 0.5,
        "top_k": None,
        "min_p": None,
        "repetition_penalty": None,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
    }


async def test_openai_responses_stream_events_in_sglang_order(make_sim: Any) -> None:
    """A streamed response: created, in_progress, item/part added, text deltas, done events, completed."""
    sim = await make_sim()
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
    async with client:
        stream = await client.responses.create(model="m", input="hi", stream=True, extra_body={"top_k": 7})
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 16 and events[-1].response.output_text == "".join(deltas)  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_anthropic_messages_create_reads_temperature_top_p_top_k(make_sim: Any) -> None:
    """anthropic's messages.create gets a Message; the engine read exactly its three sampling fields.

    The anthropic SDK (2.x) no longer has temperature/top_p/top_k parameters; clients that still
    send them (and SGLang still reads them) do so in the body, as extra_body does.
    """
    sim = await make_sim()
    client = anthropic.AsyncAnthropic(base_url=sim.url, api_key="none", max_retries=0)
    async with client:
        raw = await client.messages.with_raw_response.create(
            model="m",
            max_tokens=3,
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_body={"temperature": 0.5, "top_k": 20, "top_p": 0.9},
        )
    message = await raw.parse()
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3
    assert message.content[0].type == "text" and message.content[0].text.split() == ["sim", "lorem", "ipsum"]
    assert json.loads(raw.headers["x-sim-sampling-params"]) == {"temperature": 0.5, "top_p": 0.9, "top_k": 20}


async def test_anthropic_messages_stream(make_sim: Any) -> None:
    """A streamed message arrives as Anthropic's events; the client assembles the text."""
    sim = await make_sim()
    client = anthropic.AsyncAnthropic(base_url=sim.url, api_key="none", max_retries=0)
    async with client, client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.stop_reason == "end_turn" and len(final.content[0].text.split()) == 16  # type: ignore[union-attr]


# -- raw bodies over h1 and h2c ---------------------------------------------------------------------
async def test_responses_and_messages_over_both_protocols(make_sim: Any, protocol: str) -> None:
    """/v1/responses omits n and defaults temperature in the engine; /v1/messages reads its three fields."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        responses = await http.post("/v1/responses", {"model": "m", "input": "hi", "n": 3, "min_p": "0.1"})
        messages = await http.post(
            "/v1/messages", {"model": "m", "max_tokens": 4, "messages": MESSAGES, "top_k": "5", "min_p": 0.2}
        )
        bad = await http.post("/v1/messages", {"model": "m", "max_tokens": 0, "messages": MESSAGES})
    assert responses.status == 200 and responses.json()["temperature"] == 0.7
    assert "n" not in responses.sampling and responses.sampling["min_p"] == 0.1
    assert messages.status == 200 and messages.json()["type"] == "message"
    assert messages.sampling == {"temperature": None, "top_p": None, "top_k": 5}
    assert bad.status == 422


async def test_responses_stream_over_both_protocols(make_sim: Any, protocol: str) -> None:
    """The Responses stream is named SSE events ending with response.completed (no [DONE])."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/v1/responses", {"input": "hi", "stream": True, "max_output_tokens": 2})
    assert reply.headers["content-type"] == "text/event-stream"
    events = _sse_events(reply.body)
    assert events[-1][0] == "response.incomplete" and events[-1][1]["response"]["status"] == "incomplete"
    assert b"[DONE]" not in reply.body


async def test_ollama_chat_streams_ndjson_by_default(make_sim: Any, protocol: str) -> None:
    """/api/chat streams NDJSON unless stream is false; options carry the sampling fields, untyped."""
    sim = await make_sim()
    body = {"model": "m", "messages": MESSAGES, "options": {"temperature": True, "top_k": 40.5, "min_p": 0.3}}
    async with Http(sim.url, protocol) as http:
        streamed = await http.post("/api/chat", body)
        whole = await http.post("/api/chat", {**body, "stream": False, "options": {"num_predict": 2}})
    assert streamed.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in streamed.body.splitlines()]
    assert [line["done"] for line in lines] == [False] * 16 + [True]
    assert lines[-1]["done_reason"] == "stop" and lines[0]["message"]["role"] == "assistant"
    assert streamed.sampling == {
        "temperature": True,
        "top_p": None,
        "top_k": 40.5,
        "presence_penalty": None,
        "frequency_penalty": None,
    }
    answer = whole.json()
    assert (
        answer["done"] is True
        and answer["eval_count"] == 2
        and answer["message"]["content"].split() == ["sim", "lorem"]
    )


async def test_ollama_generate_and_its_refusals(make_sim: Any, protocol: str) -> None:
    """/api/generate answers text; a string option or a seed fails in the engine's SamplingParams."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        ok = await http.post(
            "/api/generate", {"model": "m", "prompt": "hi", "stream": False, "options": {"top_p": 0.5}}
        )
        blank = await http.post("/api/generate", {"model": "m", "prompt": "  ", "options": {"top_p": "x"}})
        string = await http.post("/api/generate", {"model": "m", "prompt": "hi", "options": {"top_p": "0.5"}})
        seed = await http.post("/api/chat", {"model": "m", "messages": MESSAGES, "options": {"seed": 1}})
    assert ok.status == 200 and len(ok.json()["response"].split()) == 16 and ok.sampling["top_p"] == 0.5
    assert blank.status == 200 and json.loads(blank.body.splitlines()[0])["done"] is True
    assert string.status == 500 and seed.status == 500


async def test_vertex_predictions_and_ungated_parameters(make_sim: Any, protocol: str) -> None:
    """/vertex_generate answers {"predictions": [...]} per instance; parameters.sampling_params is read as sent."""
    sim = await make_sim()
    body = {
        "instances": [{"text": "a"}, {"text": "b"}],
        "parameters": {"sampling_params": {"temperature": 0.5, "top_k": 40.0, "max_new_tokens": 3}},
    }
    async with Http(sim.url, protocol) as http:
        reply = await http.post("/vertex_generate", body)
        batch = await http.post(
            "/vertex_generate",
            {
                "instances": [{"text": "a"}, {"text": "b"}],
                "parameters": {"sampling_params": [{"top_p": 0.5}, {"top_p": 0.6}]},
            },
        )
        empty = await http.post("/vertex_generate", {"instances": []})
    predictions = reply.json()["predictions"]
    assert len(predictions) == 2 and predictions[0]["text"].split() == ["sim", "lorem", "ipsum"]
    assert reply.sampling["temperature"] == 0.5 and reply.sampling["top_k"] == 40.0
    assert [s["top_p"] for s in json.loads(batch.headers["x-sim-sampling-params"])] == [0.5, 0.6]
    assert empty.status == 200 and empty.json() == []


def _form(fields: list[tuple[str, bytes]], file: bool = True) -> tuple[bytes, str]:
    boundary = "sim-boundary-7"
    parts = [(f'name="{k}"', v) for k, v in fields]
    if file:
        parts.insert(0, ('name="file"; filename="a.wav"\r\nContent-Type: audio/wav', b"RIFF\x00\x01"))
    body = b"".join(
        f"--{boundary}\r\nContent-Disposition: form-data; {head}\r\n\r\n".encode() + value + b"\r\n"
        for head, value in parts
    )
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


async def test_transcription_reads_the_form_temperature(make_sim: Any, protocol: str) -> None:
    """The multipart form's last temperature is read; empty means the Form default 0.0; no file is a 422."""
    sim = await make_sim()
    replies = []
    async with Http(sim.url, protocol) as http:
        for fields, file in (
            ([("temperature", b"0.3"), ("temperature", b"0.7")], True),
            ([("temperature", b"")], True),
            ([("temperature", b"abc")], True),
            ([("temperature", b"0.3")], False),
            ([("response_format", b"text")], True),
        ):
            body, content_type = _form(fields, file)
            replies.append(await http.post("/v1/audio/transcriptions", raw=body, content_type=content_type))
    last, empty, bad, missing, text = replies
    assert last.status == 200 and last.json()["text"] and last.sampling == {"temperature": 0.7}
    assert empty.sampling == {"temperature": 0.0}
    assert bad.status == 422 and missing.status == 422
    assert text.status == 200 and text.headers["content-type"].startswith("text/plain")


async def test_transcription_with_the_openai_client(make_sim: Any) -> None:
    """openai's audio.transcriptions.create sends a real multipart body the engine reads."""
    sim = await make_sim()
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
    async with client:
        raw = await client.audio.transcriptions.with_raw_response.create(
            model="whisper", file=("a.wav", b"RIFF\x00\x01\x02"), temperature=0.4
        )
    assert raw.parse().text and json.loads(raw.headers["x-sim-sampling-params"]) == {"temperature": 0.4}


@pytest.mark.parametrize(
    ("path", "body", "key"),
    [
        ("/v1/embeddings", {"input": ["a b c d", "e"]}, "data"),
        ("/v1/tokenize", {"prompt": "hello world!"}, "tokens"),
        ("/tokenize", {"prompt": ["a", "b"]}, "count"),
        ("/v1/detokenize", {"tokens": [1, 2, 3]}, "text"),
        ("/v1/messages/count_tokens", {"model": "m", "messages": MESSAGES}, "input_tokens"),
    ],
)
async def test_unjudged_routes_answer_without_sampling(
    make_sim: Any, protocol: str, path: str, body: dict[str, Any], key: str
) -> None:
    """Embedding and tokenizer routes answer in SGLang's shapes and read no sampling field."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        reply = await http.post(path, body)
    assert reply.status == 200 and key in reply.json()
    assert "x-sim-sampling-params" not in reply.headers


async def test_invocations_and_put_generate(make_sim: Any, protocol: str) -> None:
    """/invocations is chat (SageMaker) and /generate takes PUT as well as POST."""
    sim = await make_sim()
    async with Http(sim.url, protocol) as http:
        chat = await http.post("/invocations", {"messages": MESSAGES, "temperature": 0.3})
        put = await http.request("PUT", "/generate", {"text": "hi", "sampling_params": {"top_p": 0.5}})
        get = await http.get("/generate")
    assert chat.json()["object"] == "chat.completion" and chat.sampling["temperature"] == 0.3
    assert put.status == 200 and put.sampling["top_p"] == 0.5
    assert get.status == 405 and get.headers["allow"] == "POST, PUT"
