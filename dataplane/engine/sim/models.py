"""Request models of the simulated engine, typed as SGLang's engine types them (SPEC §2, reference A.1).

The engine reads a body with ``json.loads`` (last key wins) and validates it with pydantic in
lax mode, so ``"0.5"`` is a float and ``true`` is 1; these models reproduce exactly that, which
is what lets tests check the SPEC §3.3 safety invariant against what "the engine" read.
Unknown keys are ignored, as the engine's models do. Validation only: no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "n",
)
"""SPEC §2 order: the order of the ``x-sim-sampling-params`` header."""

DEFAULT_MAX_TOKENS = 16
# SamplingParams' "whole vocabulary" sentinel for /generate (reference A.1).
TOP_K_ALL = 1 << 30


class _Lax(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lax):
    include_usage: bool = False


class ChatMessage(_Lax):
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Lax):
    """``POST /v1/chat/completions``: five Optional sampling fields, three with plain defaults."""

    messages: list[ChatMessage]
    model: str = "default"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None


class CompletionRequest(_Lax):
    """``POST /v1/completions``: every sampling field has a non-Optional default."""

    prompt: str | list[str] | list[int] | list[list[int]]
    model: str = "default"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1
    max_tokens: int = DEFAULT_MAX_TOKENS
    stream: bool = False
    stream_options: StreamOptions | None = None


class SamplingParams(_Lax):
    """``/generate``'s ``sampling_params`` (reference A.1, SGLang's SamplingParams defaults)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = TOP_K_ALL
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1
    max_new_tokens: int = DEFAULT_MAX_TOKENS


class GenerateRequest(_Lax):
    """``POST /generate``: text or token ids, sampling parameters nested."""

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: SamplingParams | None = None
    stream: bool = False
    rid: str | None = None


def sampling_values(params: BaseModel) -> dict[str, Any]:
    """The 8 SPEC §2 fields as the engine read them (None for an unset Optional field)."""
    return {name: getattr(params, name) for name in SAMPLING_FIELDS}


def verify_sampling(values: dict[str, Any]) -> str | None:
    """SGLang's ``SamplingParams.verify`` on resolved values; the first problem, or None.

    ``None`` (an unset Optional chat field) resolves to the engine default first, as
    ``to_sampling_params`` does (reference A.1).
    """
    temperature = _or(values["temperature"], 1.0)
    top_p = _or(values["top_p"], 1.0)
    top_k = _or(values["top_k"], -1)
    min_p = _or(values["min_p"], 0.0)
    repetition_penalty = _or(values["repetition_penalty"], 1.0)
    if not (math.isfinite(temperature) and temperature >= 0.0):
        return f"temperature must be non-negative, got {temperature}."
    if not 0.0 < top_p <= 1.0:
        return f"top_p must be in (0, 1], got {top_p}."
    if not 0.0 <= min_p <= 1.0:
        return f"min_p must be in [0, 1], got {min_p}."
    if top_k < 1 and top_k != -1:
        return f"top_k must be -1 (disable) or at least 1, got {top_k}."
    if not -2.0 <= values["frequency_penalty"] <= 2.0:
        return f"frequency_penalty must be in [-2, 2], got {values['frequency_penalty']}."
    if not -2.0 <= values["presence_penalty"] <= 2.0:
        return f"presence_penalty must be in [-2, 2], got {values['presence_penalty']}."
    if not 0.0 < repetition_penalty <= 2.0:
        return f"repetition_penalty must be in (0, 2], got {repetition_penalty}."
    if values["n"] < 1:
        return f"n must be at least 1, got {values['n']}."
    return None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def prompt_tokens_of_text(text: str) -> int:
    """≈ bytes/4, as a tokenizer would roughly count; at least one token."""
    return max(1, len(text.encode("utf-8", "surrogatepass")) // 4)


def chat_prompt_tokens(request: ChatCompletionRequest) -> int:
    size = 0
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            size += len(content.encode("utf-8", "surrogatepass"))
        elif content is not None:
            for part in content:
                text = part.get("text")
                if isinstance(text, str):
                    size += len(text.encode("utf-8", "surrogatepass"))
    return max(1, size // 4)


def completion_prompt_tokens(prompt: str | list[str] | list[int] | list[list[int]]) -> int:
    if isinstance(prompt, str):
        return prompt_tokens_of_text(prompt)
    total = 0
    for item in prompt:
        if isinstance(item, str):
            total += prompt_tokens_of_text(item)
        elif isinstance(item, list):
            total += len(item)
        else:
            total += 1
    return max(1, total)


def generate_prompt_tokens(request: GenerateRequest) -> int:
    if request.input_ids is not None:
        return completion_prompt_tokens(request.input_ids)
    if request.text is not None:
        return completion_prompt_tokens(request.text)
    return 1
