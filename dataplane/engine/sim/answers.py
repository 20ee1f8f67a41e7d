"""What engine-sim answers with: a whole body, or the records of a stream (SGLang's order).

No I/O: a validated :class:`Job` and a token count in, bytes out. Chat/completion choices
depend only on (n, tokens, finish reason), so they are built once per combination and reused.
Streams are SSE ``data:`` records (OpenAI, /generate), named SSE events (Responses, Anthropic)
or NDJSON lines (Ollama), each in the order SGLang 0.5.23 sends them.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from dataplane.engine.sim import responses as r


@dataclass(slots=True)
class Job:
    """One validated generation request, whatever endpoint it came from."""

    # "chat" | "completion" | "generate" | "responses" | "messages" | "ollama_chat"
    # | "ollama_generate" | "vertex"
    kind: str
    model: str
    prompt_tokens: int
    max_new_tokens: int
    capped: bool  # the client set the token cap (finish_reason "length" when it is reached)
    choices: int  # n x batch size
    stream: bool
    include_usage: bool
    headers: list[tuple[bytes, bytes]]
    # Request fields an answer repeats (the Responses object echoes instructions, temperature…).
    echo: dict[str, Any] = field(default_factory=dict)
    # The prompt's bytes as the prefix cache sees them (``prompts``); empty: never cached.
    prompt: bytes = b""


def hit_cap(job: Job, generated: int) -> bool:
    """Whether the answer ended at the client's token cap ("length") rather than a stop token."""
    return job.capped and generated >= job.max_new_tokens


# Everything in a chat/completion body but its id and creation time depends only on this key, so
# the rest is encoded once per combination and spliced: id and created are the first two fields.
_HEAD_PLACEHOLDER = b'{"id":"","created":0'


def _body_tail(kind: str, model: str, n: int, generated: int, reason: str, prompt_tokens: int) -> bytes:
    text = r.token_text(0, generated)
    used = r.usage(prompt_tokens, n * generated)
    if kind == "chat":
        chat_choices = [r.ChatChoice(i, r.ChatMessageOut("assistant", text), reason) for i in range(n)]
        encoded = r.encode(r.ChatCompletion("", 0, model, chat_choices, used))
    else:
        choices = [r.CompletionChoice(i, text, reason) for i in range(n)]
        encoded = r.encode(r.Completion("", 0, model, choices, used))
    assert encoded.startswith(_HEAD_PLACEHOLDER)
    return encoded[len(_HEAD_PLACEHOLDER) :]


_cached_body_tail = functools.lru_cache(maxsize=4096)(_body_tail)
# Client-chosen model names and token counts are part of the key: only small answers are
# cached, so the cache stays small (bounded memory) whatever clients send.
_CACHED_MODEL_CHARS = 256


def full_body(job: Job, generated: int) -> bytes:
    """The whole non-streamed answer of ``job`` after ``generated`` tokens per sequence."""
    capped = hit_cap(job, generated)
    reason = r.finish_reason(capped)
    other = _OTHER_BODIES.get(job.kind)
    if other is not None:
        return other(job, generated)
    if job.kind != "generate":
        small = len(job.model) <= _CACHED_MODEL_CHARS and generated * job.choices <= r.CACHED_TOKENS
        tail_of = _cached_body_tail if small else _body_tail
        tail = tail_of(job.kind, job.model, job.choices, generated, reason, job.prompt_tokens)
        rid = r.new_id("chatcmpl" if job.kind == "chat" else "cmpl")
        # ids are [0-9a-z-] only: nothing to escape.
        return b'{"id":"%s","created":%d%s' % (rid.encode(), int(time.time()), tail)
    text = r.token_text(0, generated)
    outs = [
        r.GenerateOut(
            text,
            r.GenerateMeta(
                r.new_id("gen"),
                r.FinishReason(reason, generated if capped else None),
                job.prompt_tokens,
                generated,
            ),
        )
        for _ in range(job.choices)
    ]
    return r.encode(outs[0] if len(outs) == 1 else outs)


def _generate_outs(job: Job, generated: int) -> list[r.GenerateOut]:
    capped = hit_cap(job, generated)
    reason = r.finish_reason(capped)
    text = r.token_text(0, generated)
    return [
        r.GenerateOut(
            text,
            r.GenerateMeta(
                r.new_id("gen"),
                r.FinishReason(reason, generated if capped else None),
                job.prompt_tokens,
                generated,
            ),
        )
        for _ in range(job.choices)
    ]


def _responses_body(job: Job, generated: int) -> bytes:
    text = r.token_text(0, generated)
    status = "incomplete" if hit_cap(job, generated) else "completed"
    output = [r.responses_message(r.new_id("msg"), text, "completed")]
    usage = r.responses_usage(job.prompt_tokens, generated)
    return r.encode(
        r.responses_object(r.new_id("resp"), int(time.time()), job.model, job.echo, status, output, usage)
    )


def _messages_body(job: Job, generated: int) -> bytes:
    usage = {"input_tokens": job.prompt_tokens, "output_tokens": generated}
    text = r.token_text(0, generated)
    return r.encode(
        r.anthropic_message(r.new_id("msg"), job.model, text, _stop_reason(job, generated), usage)
    )


def _stop_reason(job: Job, generated: int) -> str:
    # anthropic/serving.py STOP_REASON_MAP: length -> max_tokens, stop -> end_turn.
    return "max_tokens" if hit_cap(job, generated) else "end_turn"


def _ollama_body(job: Job, generated: int) -> bytes:
    text = r.token_text(0, generated)
    created = r.ollama_time()
    if job.kind == "ollama_chat":
        line = r.ollama_chat_line(job.model, created, text, True)
    else:
        line = r.ollama_generate_line(job.model, created, text, True)
        line["context"] = None
    elapsed = time.monotonic_ns() - job.echo.get("started_ns", time.monotonic_ns())
    line.update(r.ollama_counts(elapsed, job.prompt_tokens, generated))
    return r.encode(line)


def _vertex_body(job: Job, generated: int) -> bytes:
    # http_server.vertex_generate: {"predictions": <the /generate answer of the batch>}.
    return r.encode({"predictions": _generate_outs(job, generated)})


_OTHER_BODIES = {
    "responses": _responses_body,
    "messages": _messages_body,
    "ollama_chat": _ollama_body,
    "ollama_generate": _ollama_body,
    "vertex": _vertex_body,
}


class StreamBody:
    """SSE records of one streamed answer, in SGLang's order: role, tokens, finish, usage, [DONE]."""

    __slots__ = ("created", "id", "item", "job", "seq")

    def __init__(self, job: Job) -> None:
        self.job = job
        prefix = {"chat": "chatcmpl", "completion": "cmpl", "responses": "resp", "messages": "msg"}
        self.id = r.new_id(prefix.get(job.kind, "gen"))
        self.item = r.new_id("msg")
        self.created = int(time.time())
        self.seq = 0  # the Responses stream's sequence_number

    def opening(self) -> bytes:
        if self.job.kind == "responses":
            return self._responses_opening()
        if self.job.kind == "messages":
            usage = {"input_tokens": self.job.prompt_tokens, "output_tokens": 0}
            start = r.anthropic_message(self.id, self.job.model, None, None, usage)
            return r.event("message_start", {"type": "message_start", "message": start}) + r.event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
        if self.job.kind != "chat":
            return b""
        return b"".join(
            r.sse(self._chat([r.ChatChunkChoice(i, r.Delta(content="", role="assistant"))]))
            for i in range(self.job.choices)
        )

    def tokens(self, start: int, stop: int) -> bytes:
        out = bytearray()
        named = self.job.kind in _NAMED_STREAMS
        for t in range(start, stop):
            for i in range(self.job.choices):
                record = self._token(i, t)
                out += record if named else r.sse(record)
        return bytes(out)

    def _token(self, index: int, t: int) -> Any:
        piece = r.token_text(t, t + 1)
        if self.job.kind in _NAMED_STREAMS:
            return self._named_token(piece)
        if self.job.kind == "chat":
            return self._chat([r.ChatChunkChoice(index, r.Delta(content=piece))])
        if self.job.kind == "completion":
            return r.Completion(
                self.id, self.created, self.job.model, [r.CompletionChoice(index, piece, None)]
            )
        return r.GenerateOut(
            r.token_text(0, t + 1), r.GenerateMeta(self.id, None, self.job.prompt_tokens, t + 1)
        )

    def closing(self, generated: int) -> bytes:
        job = self.job
        if job.kind in _NAMED_STREAMS:
            return self._named_closing(generated)
        capped = hit_cap(job, generated)
        reason = r.finish_reason(capped)
        used = r.usage(job.prompt_tokens, job.choices * generated)
        records: list[bytes] = []
        if job.kind == "chat":
            records += [
                r.sse(self._chat([r.ChatChunkChoice(i, r.Delta(content=""), reason)]))
                for i in range(job.choices)
            ]
            if job.include_usage:
                records.append(r.sse(r.ChatCompletionChunk(self.id, self.created, job.model, [], used)))
        elif job.kind == "completion":
            records += [
                r.sse(r.Completion(self.id, self.created, job.model, [r.CompletionChoice(i, "", reason)]))
                for i in range(job.choices)
            ]
            if job.include_usage:
                records.append(r.sse(r.Completion(self.id, self.created, job.model, [], used)))
        else:
            meta = r.GenerateMeta(
                self.id,
                r.FinishReason(reason, generated if capped else None),
                job.prompt_tokens,
                generated,
            )
            records.append(r.sse(r.GenerateOut(r.token_text(0, generated), meta)))
        records.append(r.SSE_DONE)
        return b"".join(records)

    def _chat(self, choices: list[r.ChatChunkChoice]) -> r.ChatCompletionChunk:
        return r.ChatCompletionChunk(self.id, self.created, self.job.model, choices)

    # -- Responses, Anthropic and Ollama streams (their records are complete frames) --------------
    def _responses_event(self, kind: str, **fields: Any) -> bytes:
        # serving_responses.py _send_event: "event: <type>" + the event with its sequence_number.
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return r.event(kind, payload)

    def _responses_opening(self) -> bytes:
        job = self.job
        initial = r.responses_object(self.id, self.created, job.model, job.echo, "in_progress", [], None)
        where = {"output_index": 0, "item_id": self.item, "content_index": 0}
        return b"".join(
            [
                self._responses_event("response.created", response=initial),
                self._responses_event("response.in_progress", response=initial),
                self._responses_event(
                    "response.output_item.added",
                    output_index=0,
                    item=r.responses_message(self.item, None, "in_progress"),
                ),
                self._responses_event("response.content_part.added", **where, part=r.output_text("")),
            ]
        )

    def _named_token(self, piece: str) -> bytes:
        job = self.job
        if job.kind == "responses":
            return self._responses_event(
                "response.output_text.delta",
                output_index=0,
                item_id=self.item,
                content_index=0,
                delta=piece,
                logprobs=[],
            )
        if job.kind == "messages":
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
            return r.event("content_block_delta", delta)
        created = r.ollama_time()
        if job.kind == "ollama_chat":
            return r.ndjson(r.ollama_chat_line(job.model, created, piece, False))
        return r.ndjson(r.ollama_generate_line(job.model, created, piece, False))

    def _named_closing(self, generated: int) -> bytes:
        job = self.job
        text = r.token_text(0, generated)
        if job.kind == "responses":
            where = {"output_index": 0, "item_id": self.item, "content_index": 0}
            item = r.responses_message(self.item, text, "completed")
            status = "incomplete" if hit_cap(job, generated) else "completed"
            usage = r.responses_usage(job.prompt_tokens, generated)
            final = r.responses_object(self.id, self.created, job.model, job.echo, status, [item], usage)
            return b"".join(
                [
                    self._responses_event("response.output_text.done", **where, text=text, logprobs=[]),
                    self._responses_event("response.content_part.done", **where, part=r.output_text(text)),
                    self._responses_event("response.output_item.done", output_index=0, item=item),
                    self._responses_event(f"response.{status}", response=final),
                ]
            )
        if job.kind == "messages":
            end = {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(job, generated)},
                "usage": {"output_tokens": generated},
            }
            return b"".join(
                [
                    r.event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    r.event("message_delta", end),
                    r.event("message_stop", {"type": "message_stop"}),
                ]
            )
        created = r.ollama_time()
        if job.kind == "ollama_chat":
            return r.ndjson(r.ollama_chat_line(job.model, created, "", True))
        return r.ndjson(r.ollama_generate_line(job.model, created, "", True))


_NAMED_STREAMS = frozenset({"responses", "messages", "ollama_chat", "ollama_generate"})
