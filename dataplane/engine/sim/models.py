"""Request models of the simulated engine, typed as SGLang 0.5.23 types them (SPEC §2, reference §G).

The engine reads a body with ``orjson.loads`` (last key wins) and validates it with the route's
pydantic model in lax mode, so ``"0.5"`` is a float and ``true`` is 1; these models reproduce
the sampling fields of each route's model, which is what lets tests check the SPEC §3.3 safety
invariant against what "the engine" read. Routes whose fields SGLang passes on untyped (Ollama's
``options``, Vertex's ``parameters``) keep the JSON values as they are (:func:`untyped_sampling`).
Unknown keys are ignored, as the engine's models do. Validation only: no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

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


# -- the routes added with SPEC §5.1 ---------------------------------------------------------------
RESPONSES_FIELDS = SAMPLING_FIELDS[:-1]
"""ResponsesRequest has every §2 field but ``n``."""
MESSAGES_FIELDS = ("temperature", "top_p", "top_k")
"""AnthropicMessagesRequest's sampling fields."""
OLLAMA_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
"""Ollama ``options`` keys SGLang maps onto §2 fields (OllamaServing._convert_options_to_sampling_params);
``num_predict`` is the token cap, ``seed`` is mapped to a name SamplingParams does not have."""
OLLAMA_FIELDS = tuple(OLLAMA_OPTIONS.values())


class ResponsesRequest(_Lax):
    """``POST /v1/responses``: no ``n``; an omitted temperature is 0.7 (ResponsesRequest defaults)."""

    input: str | list[dict[str, Any]]
    model: str | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0


class AnthropicMessage(_Lax):
    role: str
    content: str | list[dict[str, Any]]


class MessagesRequest(_Lax):
    """``POST /v1/messages`` (Anthropic): temperature, top_p, top_k; max_tokens required, positive."""

    model: str
    messages: list[AnthropicMessage]
    max_tokens: int
    system: str | list[dict[str, Any]] | None = None
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    @field_validator("max_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("max_tokens must be positive")
        return value


class CountTokensRequest(_Lax):
    """``POST /v1/messages/count_tokens``."""

    model: str
    messages: list[AnthropicMessage]
    system: str | list[dict[str, Any]] | None = None


class OllamaMessage(_Lax):
    role: str
    content: str


class OllamaChatRequest(_Lax):
    """``POST /api/chat``: Ollama streams unless told not to; ``options`` is an untyped dict."""

    model: str
    messages: list[OllamaMessage]
    stream: bool = True
    options: dict[str, Any] | None = None


class OllamaGenerateRequest(_Lax):
    """``POST /api/generate``."""

    model: str
    prompt: str
    system: str | None = None
    stream: bool = True
    options: dict[str, Any] | None = None


class VertexRequest(_Lax):
    """``POST /vertex_generate`` (Vertex AI predict): ``parameters`` is spread into /generate's input."""

    instances: list[dict[str, Any]]
    parameters: dict[str, Any] | None = None


class TranscriptionForm(_Lax):
    """The form fields of ``POST /v1/audio/transcriptions`` (``Form`` defaults of the handler)."""

    model: str = "default"
    language: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    stream: bool = False


class EmbeddingRequest(_Lax):
    """``POST /v1/embeddings``."""

    input: str | list[str] | list[int] | list[list[int]]
    model: str = "default"


class TokenizeRequest(_Lax):
    """``POST /v1/tokenize``."""

    prompt: str | list[str]
    model: str = "default"


class DetokenizeRequest(_Lax):
    """``POST /v1/detokenize``."""

    tokens: list[int] | list[list[int]]
    model: str = "default"


# SamplingParams' defaults, for fields a route leaves unset (None), before verify.
ENGINE_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "n": 1,
}


def untyped_sampling(params: dict[str, Any], names: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """Values SGLang hands to ``SamplingParams`` without validating them (Ollama, Vertex).

    JSON numbers, bools (Python's bool is an int) and null pass as they are; anything else is
    what the engine's comparisons then fail on (a TypeError, its 500), reported as the problem.
    """
    values: dict[str, Any] = {}
    for name in names:
        value = params.get(name)
        if value is not None and not isinstance(value, (int, float)):
            return {}, f"{name} must be a number, got {type(value).__name__}"
        values[name] = value
    return values, None


def sampling_values(params: BaseModel) -> dict[str, Any]:
    """The 8 SPEC §2 fields as the engine read them (None for an unset Optional field)."""
    return {name: getattr(params, name) for name in SAMPLING_FIELDS}


def verify_sampling(values: dict[str, Any]) -> str | None:
    """SGLang 0.5.23's ``SamplingParams.verify`` on resolved values; the first problem, or None.

    ``None`` (an unset Optional chat field) resolves to the engine default first, as
    ``to_sampling_params`` does (reference A.1).
    """
    values = {name: _or(values.get(name), default) for name, default in ENGINE_DEFAULTS.items()}
    temperature = values["temperature"]
    top_p = values["top_p"]
    top_k = values["top_k"]
    min_p = values["min_p"]
    repetition_penalty = values["repetition_penalty"]
    if not (math.isfinite(temperature) and temperature >= 0.0):
        return f"temperature must be a non-negative finite number, got {temperature}."
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
        return f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}."
    # 0.5.23's verify has no n check: n < 1 is one sequence (GenerateReqInput only fans out n > 1).
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
