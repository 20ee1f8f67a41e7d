"""What engine-sim answers with: a whole body, or the SSE records of a stream (SGLang's order).

No I/O: a validated :class:`Job` and a token count in, bytes out. Choices depend only on
(n, tokens, finish reason), so they are built once per combination and reused.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from dataplane.engine.sim import responses as r


@dataclass(slots=True)
class Job:
    """One validated generation request, whatever endpoint it came from."""

    kind: str  # "chat" | "completion" | "generate"
    model: str
    prompt_tokens: int
    max_new_tokens: int
    capped: bool  # the client set the token cap (finish_reason "length")
    choices: int  # n x batch size
    stream: bool
    include_usage: bool
    headers: list[tuple[bytes, bytes]]


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
    reason = r.finish_reason(job.capped)
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
                r.FinishReason(reason, generated if job.capped else None),
                job.prompt_tokens,
                generated,
            ),
        )
        for _ in range(job.choices)
    ]
    return r.encode(outs[0] if len(outs) == 1 else outs)


class StreamBody:
    """SSE records of one streamed answer, in SGLang's order: role, tokens, finish, usage, [DONE]."""

    __slots__ = ("created", "id", "job")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.id = r.new_id({"chat": "chatcmpl", "completion": "cmpl"}.get(job.kind, "gen"))
        self.created = int(time.time())

    def opening(self) -> bytes:
        if self.job.kind != "chat":
            return b""
        return b"".join(
            r.sse(self._chat([r.ChatChunkChoice(i, r.Delta(content="", role="assistant"))]))
            for i in range(self.job.choices)
        )

    def tokens(self, start: int, stop: int) -> bytes:
        out = bytearray()
        for t in range(start, stop):
            for i in range(self.job.choices):
                out += r.sse(self._token(i, t))
        return bytes(out)

    def _token(self, index: int, t: int) -> Any:
        piece = r.token_text(t, t + 1)
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
        reason = r.finish_reason(job.capped)
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
                r.FinishReason(reason, generated if job.capped else None),
                job.prompt_tokens,
                generated,
            )
            records.append(r.sse(r.GenerateOut(r.token_text(0, generated), meta)))
        records.append(r.SSE_DONE)
        return b"".join(records)

    def _chat(self, choices: list[r.ChatChunkChoice]) -> r.ChatCompletionChunk:
        return r.ChatCompletionChunk(self.id, self.created, self.job.model, choices)
