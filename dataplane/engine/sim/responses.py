"""Response bodies of the simulated engine, in the shapes SGLang's OpenAI-compatible server sends.

msgspec Structs encoded by one module-level encoder (built once, ARCHITECTURE.md): the
official ``openai`` client parses every one of them. Text is a deterministic word cycle,
one word per simulated token. Pure: values in, bytes out.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

import msgspec

WORDS = tuple(
    [
        "",
        "sim",
        "lorem",
        "ipsum",
        "dolor",
        "sit",
        "amet",
        "consectetur",
        "adipiscing",
        "elit",
        "sed",
        "do",
        "eiusmod",
        "tempor",
        "incididunt",
        "ut",
        "labore",
        "et",
        "dolore",
        "magna",
        "aliqua",
    ][1:]
)
_encoder = msgspec.json.Encoder()
_ids = itertools.count(1)
_ID_PREFIX = os.urandom(4).hex()

JSON_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
]
SSE_DONE = b"data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    """A unique response id (process-random prefix + counter: no uuid4 on the hot path)."""
    return f"{prefix}-{_ID_PREFIX}{next(_ids):x}"


def _token_text(start: int, stop: int) -> str:
    return "".join(" " + WORDS[i % len(WORDS)] for i in range(start, stop))


_cached_token_text = functools.lru_cache(maxsize=4096)(_token_text)
# Only short texts are cached, so the cache stays small whatever max_tokens clients send.
CACHED_TOKENS = 1024


def token_text(start: int, stop: int) -> str:
    """The text of generated tokens ``start .. stop-1`` (each a leading space and a word)."""
    return (_cached_token_text if stop - start <= CACHED_TOKENS else _token_text)(start, stop)


def finish_reason(client_capped: bool) -> str:
    """``length`` when the client's token cap ended it, else ``stop`` (the "model" ended it)."""
    return "length" if client_capped else "stop"


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)


class ChatMessageOut(msgspec.Struct):
    role: str
    content: str


class ChatChoice(msgspec.Struct):
    index: int
    message: ChatMessageOut
    finish_reason: str
    logprobs: None = None


class ChatCompletion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"


class Delta(msgspec.Struct, omit_defaults=True):
    content: str | None = None
    role: str | None = None


class ChatChunkChoice(msgspec.Struct):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    object: str = "chat.completion.chunk"


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    finish_reason: str | None
    logprobs: None = None


class Completion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    object: str = "text_completion"


class FinishReason(msgspec.Struct):
    type: str
    length: int | None = None


class GenerateMeta(msgspec.Struct):
    id: str
    finish_reason: FinishReason | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


class GenerateOut(msgspec.Struct):
    text: str
    meta_info: GenerateMeta


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def sse(value: Any) -> bytes:
    """One Server-Sent Events ``data:`` record."""
    return b"data: " + _encoder.encode(value) + b"\n\n"


def sampling_header(values: Any) -> bytes:
    """Compact JSON of what the engine read (an object, or a list with one per prompt of a
    batch); non-finite floats as Python's json writes them."""
    return json.dumps(values, separators=(",", ":")).encode()


def openai_error(message: str, status: int = 400) -> bytes:
    """SGLang's OpenAI-style error body."""
    return _encoder.encode(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    )


def validation_error(errors: Sequence[Any]) -> bytes:
    """FastAPI's 422 body: pydantic errors with ``body`` prefixed to every location."""
    return _encoder.encode({"detail": [_fastapi_error(e) for e in errors]})


def _fastapi_error(error: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": error["type"],
        "loc": ["body", *error["loc"]],
        "msg": error["msg"],
        "input": _jsonable(error.get("input")),
    }
    if "ctx" in error:
        out["ctx"] = {k: _jsonable(v) for k, v in error["ctx"].items()}
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, bool, type(None))):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def json_invalid(position: int, reason: str) -> bytes:
    """FastAPI's 422 for a body that is not JSON."""
    return _encoder.encode(
        {
            "detail": [
                {
                    "type": "json_invalid",
                    "loc": ["body", position],
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": reason},
                }
            ]
        }
    )


# -- the routes added with SPEC §5.1: Responses, Anthropic Messages, Ollama, Vertex, audio ------
NDJSON_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"application/x-ndjson")]
TEXT_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"text/plain; charset=utf-8")]
TRANSCRIPTION_TEXT = "engine-sim transcribed this audio"
"""What every transcription says: the simulator has no model (the route is judged, not heard)."""
EMBEDDING_DIMENSIONS = 8


def event(kind: str, payload: Any) -> bytes:
    """One named Server-Sent Event (``event:`` then ``data:``), as the Responses and Anthropic
    streams send them."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"


def ndjson(value: Any) -> bytes:
    """One line of an Ollama stream."""
    return _encoder.encode(value) + b"\n"


def ollama_time() -> str:
    """Ollama's ``created_at``: UTC, milliseconds, ``Z``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def responses_usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The Responses API usage (ResponsesResponse._serialize_usage)."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def responses_message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """The assistant message output item; ``text=None`` for the opening (no content part yet)."""
    content = [] if text is None else [output_text(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "status": status,
        "phase": "final_answer",
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": None}


def responses_object(
    rid: str,
    created: int,
    model: str,
    echo: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """The Response object (ResponsesResponse.from_request): ``echo`` repeats the request's
    instructions, max_output_tokens, temperature and top_p as SGLang's response does."""
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "model": model,
        "output": output,
        "status": status,
        "usage": usage,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": None,
        "store": True,
        "temperature": echo.get("temperature"),
        "text": {"format": {"type": "text"}},
        "top_p": echo.get("top_p"),
        "truncation": "disabled",
        "user": None,
        "metadata": None,
    }


def anthropic_message(
    rid: str, model: str, text: str | None, stop_reason: str | None, usage: dict[str, int]
) -> dict[str, Any]:
    """An Anthropic Messages response (``text=None``: the empty message of ``message_start``)."""
    return {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "content": [] if text is None else [{"type": "text", "text": text}],
        "model": model,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def ollama_chat_line(model: str, created: str, content: str, done: bool) -> dict[str, Any]:
    """One /api/chat stream record (OllamaChatStreamResponse.model_dump())."""
    return {
        "model": model,
        "created_at": created,
        "message": {"role": "assistant", "content": content, "images": None},
        "done": done,
        "done_reason": "stop" if done else None,
    }


def ollama_generate_line(model: str, created: str, text: str, done: bool) -> dict[str, Any]:
    """One /api/generate stream record."""
    return {
        "model": model,
        "created_at": created,
        "response": text,
        "done": done,
        "done_reason": "stop" if done else None,
    }


def ollama_counts(total_ns: int, prompt_tokens: int, generated: int) -> dict[str, Any]:
    """The timing and token counts of a finished Ollama answer (SGLang fills these three)."""
    return {
        "total_duration": total_ns,
        "load_duration": None,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": None,
        "eval_count": generated,
        "eval_duration": None,
    }


def embedding(index: int, tokens: int) -> list[float]:
    """A deterministic unit-ish vector per input (the simulator has no model)."""
    return [round(((index + 1) * (d + 1) % 7) / 7.0 + tokens * 1e-3, 6) for d in range(EMBEDDING_DIMENSIONS)]
