"""engine-sim's HTTP surface: the routes SGLang 0.5.23 samples on, over the shared server.

OpenAI chat (and SageMaker's ``/invocations``), completions, ``/generate`` (POST and PUT), the
Responses API, Anthropic Messages, Ollama's ``/api/chat`` and ``/api/generate``, Vertex predict
and audio transcription (SPEC §5.1), plus the unjudged routes a client may call (embeddings,
tokenize, detokenize, count_tokens). A body is read as the engine reads it (``orjson.loads``:
last key wins; NaN literals, BOMs, UTF-16/32 refused) and validated by the pydantic models of
``models`` (lax); invalid bodies get FastAPI's 422, values outside ``SamplingParams.verify``
SGLang's 400. Every answer to a generation request carries ``x-sim-sampling-params``: the §2
fields the route read, as read, so tests can check exactly what a router's injection made the
engine see (SPEC §3.3). GET answers are encoded once at startup.
"""

from __future__ import annotations

import asyncio
import operator
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from dataplane.engine.sim import responses as r
from dataplane.engine.sim.answers import Job, StreamBody, full_body
from dataplane.engine.sim.forms import FormError, parse_form
from dataplane.engine.sim.models import (
    DEFAULT_MAX_TOKENS,
    MESSAGES_FIELDS,
    OLLAMA_FIELDS,
    OLLAMA_OPTIONS,
    RESPONSES_FIELDS,
    SAMPLING_FIELDS,
    ChatCompletionRequest,
    CompletionRequest,
    CountTokensRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    GenerateRequest,
    MessagesRequest,
    OllamaChatRequest,
    OllamaGenerateRequest,
    ResponsesRequest,
    SamplingParams,
    TokenizeRequest,
    TranscriptionForm,
    VertexRequest,
    chat_prompt_tokens,
    completion_prompt_tokens,
    generate_prompt_tokens,
    prompt_tokens_of_text,
    untyped_sampling,
    verify_sampling,
)
from dataplane.engine.sim.prompts import content_bytes, prompt_blocks, text_bytes
from dataplane.engine.sim.ranks import Progress, RankPicker, SimRank
from dataplane.engine.sim.scheduler import CapacityError, SimRequest
from dataplane.http.request import ClientDisconnected, Request, Responder

SAMPLING_HEADER = b"x-sim-sampling-params"
M = TypeVar("M", bound=BaseModel)
# A route answers synchronously (returns None: no task, the rate-0 hot path) or returns the
# coroutine that finishes the answer (streams, paced decoding), which the server runs as a task.
Route = Callable[[Request, Responder], Awaitable[None] | None]
_NOT_FOUND = r.encode({"detail": "Not Found"})
_UNAUTHORIZED = b'{"error": {"message": "Unauthorized", "type": "invalid_request_error", "code": 401}}'
_NOT_ALLOWED = r.encode({"detail": "Method Not Allowed"})
_DEFAULT_SAMPLING = SamplingParams()


class SimApp:
    """The request handler given to ``dataplane.http`` (``app(request, responder)``)."""

    def __init__(
        self,
        ranks: list[SimRank],
        *,
        model: str,
        info: dict[str, Any],
        model_path: str,
        api_key: str | None = None,
    ) -> None:
        self._ranks = ranks
        self._bearer = b"Bearer " + api_key.encode() if api_key is not None else None
        self._picker = RankPicker(ranks)
        self._model = model
        # Prompts are read for the prefix cache only where decoding takes time (an instant rank
        # never holds KV): the router benchmarks' path pays nothing for it.
        self._caching = any(not rank.scheduler.costs.is_instant for rank in ranks)
        self._block_size = ranks[0].scheduler.cache.block_size if ranks else 16
        created = int(time.time())
        get_bodies = {
            b"/health": b"",
            b"/get_model_info": r.encode(
                {
                    "model_path": model_path,
                    "tokenizer_path": model_path,
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                }
            ),
            b"/v1/models": r.encode(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": model,
                            "object": "model",
                            "created": created,
                            "owned_by": "sglang",
                            "root": model_path,
                            "max_model_len": info.get("max_total_num_tokens"),
                        }
                    ],
                }
            ),
        }
        self._max_model_len = int(info.get("max_total_num_tokens") or 0)
        get = (b"GET",)
        post = (b"POST",)
        self._routes: dict[bytes, tuple[tuple[bytes, ...], Route]] = {
            path: (get, self._static(body)) for path, body in get_bodies.items()
        }
        self.set_server_info(info)
        self._routes[b"/health_generate"] = (get, self._static(b""))
        self._routes[b"/flush_cache"] = (post, self._static(b""))
        self._routes[b"/get_load"] = (get, self._load)
        self._routes[b"/v1/chat/completions"] = (post, self._chat)
        self._routes[b"/invocations"] = (post, self._chat)  # SageMaker: a full ChatCompletionRequest
        self._routes[b"/v1/completions"] = (post, self._completion)
        self._routes[b"/generate"] = ((b"POST", b"PUT"), self._generate)
        self._routes[b"/v1/responses"] = (post, self._responses)
        self._routes[b"/v1/messages"] = (post, self._messages)
        # SGLang reads these three paths from the environment when it starts (http_server.py).
        self._routes[_env_path("SGLANG_OLLAMA_CHAT_ROUTE", "/api/chat")] = (post, self._ollama_chat)
        self._routes[_env_path("SGLANG_OLLAMA_GENERATE_ROUTE", "/api/generate")] = (
            post,
            self._ollama_generate,
        )
        self._routes[_env_path("AIP_PREDICT_ROUTE", "/vertex_generate")] = (post, self._vertex)
        self._routes[b"/v1/audio/transcriptions"] = (post, self._transcription)
        # Routes that sample nothing (SPEC §5.1's unjudged list), answered honestly and simply.
        self._routes[b"/v1/embeddings"] = (post, self._embeddings)
        self._routes[b"/v1/tokenize"] = self._routes[b"/tokenize"] = (post, self._tokenize)
        self._routes[b"/v1/detokenize"] = self._routes[b"/detokenize"] = (post, self._detokenize)
        self._routes[b"/v1/messages/count_tokens"] = (post, self._count_tokens)

    def set_server_info(self, info: dict[str, Any]) -> None:
        """Replace ``/server_info`` (e.g. once the real port is known)."""
        body = r.encode(info)
        self._routes[b"/server_info"] = ((b"GET",), self._static(body))
        self._routes[b"/get_server_info"] = ((b"GET",), self._static(body))

    def __call__(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        path = request.path
        query = path.find(b"?")
        if query >= 0:
            path = path[:query]
        route = self._routes.get(path)
        # Exactly one Authorization, the right one: a second (a client's, leaked) is refused too.
        if self._bearer is not None and [v for n, v in request.headers if n == b"authorization"] != [
            self._bearer
        ]:
            responder.respond(401, r.JSON_HEADERS, _UNAUTHORIZED)
        elif route is None:
            responder.respond(404, r.JSON_HEADERS, _NOT_FOUND)
        elif request.method not in route[0]:
            responder.respond(405, [*r.JSON_HEADERS, (b"allow", b", ".join(route[0]))], _NOT_ALLOWED)
        else:
            return route[1](request, responder)
        return None

    @staticmethod
    def _static(body: bytes) -> Route:
        headers = r.JSON_HEADERS if body else []

        def answer(_request: Request, responder: Responder) -> None:
            responder.respond(200, headers, body)

        return answer

    def _load(self, _request: Request, responder: Responder) -> None:
        """SGLang's ``GET /get_load``: per dp rank, requests (running + waiting) and KV tokens."""
        loads = []
        for rank in self._ranks:
            running, waiting, tokens, _capacity = rank.scheduler.counts()
            loads.append(
                {
                    "dp_rank": rank.rank,
                    "num_reqs": running + waiting,
                    "num_waiting_reqs": waiting,
                    "num_tokens": tokens,
                }
            )
        responder.respond(200, r.JSON_HEADERS, r.encode(loads))

    # -- parsing ----------------------------------------------------------------------------
    @staticmethod
    def _parse(body: bytes, model: type[M], responder: Responder) -> M | None:
        """The engine's reading of a body: orjson.loads (http_server.ORJSONRequest), then pydantic lax."""
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            responder.respond(422, r.JSON_HEADERS, r.json_invalid(exc.pos, exc.msg))
            return None
        try:
            parsed: M = model.__pydantic_validator__.validate_python(data)  # model_validate, minus a hop
            return parsed
        except ValidationError as exc:
            responder.respond(422, r.JSON_HEADERS, r.validation_error(exc.errors(include_url=False)))
            return None

    @staticmethod
    def _checked(params: BaseModel, stream: bool, responder: Responder) -> list[tuple[bytes, bytes]] | None:
        """Answer headers with the sampling header; None (after a 400) when verify fails."""
        reading = _reading(params)
        if reading.problem is not None:
            responder.respond(400, reading.error_headers, r.openai_error(reading.problem))
            return None
        return reading.sse_headers if stream else reading.json_headers

    # -- endpoints --------------------------------------------------------------------------
    def _chat(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        req = self._parse(request.body, ChatCompletionRequest, responder)
        if req is None:
            return None
        headers = self._checked(req, req.stream, responder)
        if headers is None:
            return None
        cap = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        job = Job(
            "chat",
            req.model,
            chat_prompt_tokens(req),
            DEFAULT_MAX_TOKENS if cap is None else cap,
            cap is not None,
            max(1, req.n),  # GenerateReqInput fans out only n > 1
            req.stream,
            include_usage,
            headers,
        )
        if self._caching:
            job.prompt = b"".join(content_bytes(m.content) for m in req.messages)
        return self._serve(job, responder)

    def _completion(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        req = self._parse(request.body, CompletionRequest, responder)
        if req is None:
            return None
        headers = self._checked(req, req.stream, responder)
        if headers is None:
            return None
        batch = (
            len(req.prompt)
            if isinstance(req.prompt, list) and req.prompt and not isinstance(req.prompt[0], int)
            else 1
        )
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        job = Job(
            "completion",
            req.model,
            completion_prompt_tokens(req.prompt),
            req.max_tokens,
            True,
            max(1, req.n) * batch,
            req.stream,
            include_usage,
            headers,
        )
        if self._caching:
            job.prompt = text_bytes(req.prompt)
        return self._serve(job, responder)

    def _generate(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        req = self._parse(request.body, GenerateRequest, responder)
        if req is None:
            return None
        params = req.sampling_params if req.sampling_params is not None else _DEFAULT_SAMPLING
        headers = self._checked(params, req.stream, responder)
        if headers is None:
            return None
        if req.text is None and req.input_ids is None:
            message = "Either text, input_ids or input_embeds should be provided."
            responder.respond(400, [*r.JSON_HEADERS, headers[-1]], r.openai_error(message))
            return None
        job = Job(
            "generate",
            self._model,
            generate_prompt_tokens(req),
            params.max_new_tokens,
            True,
            max(1, params.n),
            req.stream,
            False,
            headers,
        )
        if self._caching:
            job.prompt = text_bytes(req.input_ids if req.input_ids is not None else req.text)
        return self._serve(job, responder)

    def _responses(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        """``POST /v1/responses``: every §2 field but n; temperature defaults to 0.7 in the engine."""
        req = self._parse(request.body, ResponsesRequest, responder)
        if req is None:
            return None
        values = {name: getattr(req, name) for name in RESPONSES_FIELDS}
        # ResponsesRequest._DEFAULT_SAMPLING_PARAMS: what the engine samples an omitted field with.
        resolved = {**values, "temperature": _or(req.temperature, 0.7)}
        stream = bool(req.stream)
        headers = _judged(values, resolved, _SSE if stream else _JSON, responder)
        if headers is None:
            return None
        cap = req.max_output_tokens
        prompt = prompt_tokens_of_text(
            req.input if isinstance(req.input, str) else orjson.dumps(req.input).decode()
        )
        echo = {
            "instructions": req.instructions,
            "max_output_tokens": cap,
            "temperature": resolved["temperature"],
            "top_p": _or(req.top_p, 1.0),
        }
        capped = cap is not None and cap <= DEFAULT_MAX_TOKENS
        job = Job(
            "responses",
            req.model or self._model,
            prompt,
            cap if capped and cap is not None else DEFAULT_MAX_TOKENS,
            capped,
            1,
            stream,
            False,
            headers,
            echo,
        )
        if self._caching:
            job.prompt = text_bytes(req.input) if isinstance(req.input, str) else orjson.dumps(req.input)
        return self._serve(job, responder)

    def _messages(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        """``POST /v1/messages`` (Anthropic): temperature, top_p, top_k, converted to a chat request."""
        req = self._parse(request.body, MessagesRequest, responder)
        if req is None:
            return None
        values = {name: getattr(req, name) for name in MESSAGES_FIELDS}
        stream = bool(req.stream)
        headers = _judged(values, values, _SSE if stream else _JSON, responder)
        if headers is None:
            return None
        prompt = max(1, sum(_content_tokens(m.content) for m in req.messages))
        # The "model" ends its answer after DEFAULT_MAX_TOKENS tokens unless max_tokens is lower.
        capped = req.max_tokens <= DEFAULT_MAX_TOKENS
        job = Job(
            "messages",
            req.model,
            prompt,
            min(req.max_tokens, DEFAULT_MAX_TOKENS),
            capped,
            1,
            stream,
            False,
            headers,
        )
        if self._caching:
            job.prompt = b"".join(content_bytes(m.content) for m in req.messages)
        return self._serve(job, responder)

    def _ollama_chat(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        """``POST /api/chat``: the §2 fields sit in ``options``; Ollama streams NDJSON by default."""
        req = self._parse(request.body, OllamaChatRequest, responder)
        if req is None:
            return None
        prompt = max(1, sum(prompt_tokens_of_text(m.content) for m in req.messages))
        return self._ollama("ollama_chat", req.options, req.stream, prompt, responder)

    def _ollama_generate(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        """``POST /api/generate``: a blank prompt is answered at once, as SGLang does."""
        req = self._parse(request.body, OllamaGenerateRequest, responder)
        if req is None:
            return None
        prompt = req.prompt if not req.system else f"{req.system}\n\n{req.prompt}"
        if not prompt.strip():
            line = r.ollama_generate_line(self._model, r.ollama_time(), "", True)
            if req.stream:
                responder.respond(200, r.NDJSON_HEADERS, r.ndjson(line))
            else:
                responder.respond(200, r.JSON_HEADERS, r.encode({**line, "context": None}))
            return None
        return self._ollama(
            "ollama_generate", req.options, req.stream, prompt_tokens_of_text(prompt), responder
        )

    def _ollama(
        self, kind: str, options: dict[str, Any] | None, stream: bool, prompt: int, responder: Responder
    ) -> Awaitable[None] | None:
        options = options or {}
        if "seed" in options:
            # OllamaServing maps seed to "seed", which SamplingParams does not take: a TypeError.
            message = "SamplingParams.__init__() got an unexpected keyword argument 'seed'"
            responder.respond(500, r.JSON_HEADERS, r.openai_error(message, 500))
            return None
        mapped = {sglang: options.get(ollama) for ollama, sglang in OLLAMA_OPTIONS.items()}
        values, problem = untyped_sampling(mapped, OLLAMA_FIELDS)
        if problem is not None:
            responder.respond(500, r.JSON_HEADERS, r.openai_error(problem, 500))
            return None
        headers = _judged(values, values, _NDJSON if stream else _JSON, responder)
        if headers is None:
            return None
        cap = options.get("num_predict")
        capped = isinstance(cap, int) and not isinstance(cap, bool) and 0 <= cap <= DEFAULT_MAX_TOKENS
        job = Job(
            kind,
            self._model,  # Ollama answers name the served model
            prompt,
            cap if capped and isinstance(cap, int) else DEFAULT_MAX_TOKENS,
            capped,
            1,
            stream,
            False,
            headers,
            {"started_ns": time.monotonic_ns()},
        )
        return self._serve(job, responder)

    def _vertex(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        """``POST /vertex_generate``: instances are a /generate batch, ``parameters`` its arguments.

        ``parameters.sampling_params`` reaches SamplingParams ungated (the /generate gate reads the
        Vertex body's top level), so its values are read untyped, as the engine passes them on.
        """
        req = self._parse(request.body, VertexRequest, responder)
        if req is None:
            return None
        if not req.instances:
            responder.respond(200, r.JSON_HEADERS, b"[]")
            return None
        parameters = req.parameters or {}
        prompts = _vertex_prompts(req.instances, parameters)
        if prompts is None:
            message = "Either text, input_ids or input_embeds should be provided."
            responder.respond(400, r.JSON_HEADERS, r.openai_error(message))
            return None
        given = parameters.get("sampling_params")
        elements = given if isinstance(given, list) else [given or {}] * len(prompts)
        if len(elements) < len(prompts) or not all(isinstance(e, dict) for e in elements):
            responder.respond(
                400, r.JSON_HEADERS, r.openai_error("sampling_params must give one object per instance")
            )
            return None
        readings: list[dict[str, Any]] = []
        for element in elements[: len(prompts)]:
            values, problem = untyped_sampling(element, SAMPLING_FIELDS)
            if problem is None:
                problem = verify_sampling(values)
            if problem is not None:
                responder.respond(400, r.JSON_HEADERS, r.openai_error(problem))
                return None
            readings.append(values)
        shown = readings if isinstance(given, list) else readings[0]
        stream = parameters.get("stream") is True
        headers = [
            *(r.SSE_HEADERS if stream else r.JSON_HEADERS),
            (SAMPLING_HEADER, r.sampling_header(shown)),
        ]
        n = readings[0]["n"]
        if n is None and "n" in elements[0]:
            # GenerateReqInput._handle_parallel_sampling compares sampling_params.get("n", 1) > 1.
            message = "'>' not supported between instances of 'NoneType' and 'int'"
            responder.respond(500, r.JSON_HEADERS, r.openai_error(message, 500))
            return None
        if isinstance(n, float):
            # Instances are always a batch: GenerateReqInput._expand_inputs multiplies the prompt
            # list by n, a TypeError for any float (1.0 included).
            message = "can't multiply sequence by non-int of type 'float'"
            responder.respond(500, r.JSON_HEADERS, r.openai_error(message, 500))
            return None
        choices = len(prompts) * (n if isinstance(n, int) and n > 1 else 1)
        max_new = elements[0].get("max_new_tokens")
        capped = isinstance(max_new, int) and not isinstance(max_new, bool)
        job = Job(
            "generate" if stream else "vertex",
            self._model,
            sum(prompts),
            max_new if capped and isinstance(max_new, int) else DEFAULT_MAX_TOKENS,
            capped,
            choices,
            stream,
            False,
            headers,
        )
        return self._serve(job, responder)

    def _transcription(self, request: Request, responder: Responder) -> None:
        """``POST /v1/audio/transcriptions``: a multipart form; ``temperature: float = Form(0.0)``."""
        try:
            form = parse_form(request.header(b"content-type"), request.body)
        except FormError as exc:
            responder.respond(422, r.JSON_HEADERS, r.validation_error([_missing("file", str(exc))]))
            return
        if "file" not in form.files:
            responder.respond(422, r.JSON_HEADERS, r.validation_error([_missing("file", "Field required")]))
            return
        try:
            fields = TranscriptionForm.__pydantic_validator__.validate_python(form.values())
        except ValidationError as exc:
            responder.respond(422, r.JSON_HEADERS, r.validation_error(exc.errors(include_url=False)))
            return
        if fields.response_format not in ("json", "text", "verbose_json"):
            message = "Only 'json', 'text', and 'verbose_json' formats supported"
            responder.respond(400, r.JSON_HEADERS, r.encode({"error": {"message": message}}))
            return
        values = {"temperature": fields.temperature}
        problem = verify_sampling(values)
        extra = (SAMPLING_HEADER, r.sampling_header(values))
        if problem is not None:
            responder.respond(400, [*r.JSON_HEADERS, extra], r.openai_error(problem))
            return
        text = r.TRANSCRIPTION_TEXT
        if fields.response_format == "text":
            responder.respond(200, [*r.TEXT_HEADERS, extra], text.encode())
        elif fields.response_format == "verbose_json":
            verbose = {
                "task": "transcribe",
                "language": fields.language or "en",
                "duration": 0.0,
                "text": text,
            }
            responder.respond(200, [*r.JSON_HEADERS, extra], r.encode({**verbose, "segments": []}))
        else:
            responder.respond(200, [*r.JSON_HEADERS, extra], r.encode({"text": text, "usage": None}))

    # -- routes that sample nothing ---------------------------------------------------------------
    def _embeddings(self, request: Request, responder: Responder) -> None:
        req = self._parse(request.body, EmbeddingRequest, responder)
        if req is None:
            return
        if isinstance(req.input, str) or _is_token_list(req.input):
            tokens = [_prompt_size(req.input)]
        else:
            tokens = [_prompt_size(item) for item in req.input]
        data = [
            {"object": "embedding", "index": i, "embedding": r.embedding(i, t)} for i, t in enumerate(tokens)
        ]
        used = {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}
        body = {"object": "list", "data": data, "model": req.model, "usage": used}
        responder.respond(200, r.JSON_HEADERS, r.encode(body))

    def _tokenize(self, request: Request, responder: Responder) -> None:
        req = self._parse(request.body, TokenizeRequest, responder)
        if req is None:
            return
        if isinstance(req.prompt, str):
            ids: Any = list(range(prompt_tokens_of_text(req.prompt)))
            count: Any = len(ids)
        else:
            ids = [list(range(prompt_tokens_of_text(p))) for p in req.prompt]
            count = [len(i) for i in ids]
        responder.respond(
            200,
            r.JSON_HEADERS,
            r.encode({"tokens": ids, "count": count, "max_model_len": self._max_model_len}),
        )

    def _detokenize(self, request: Request, responder: Responder) -> None:
        req = self._parse(request.body, DetokenizeRequest, responder)
        if req is None:
            return
        tokens = req.tokens
        if tokens and isinstance(tokens[0], list):
            text: Any = [r.token_text(0, len(t)) for t in tokens]
        else:
            text = r.token_text(0, len(tokens))
        responder.respond(200, r.JSON_HEADERS, r.encode({"text": text}))

    def _count_tokens(self, request: Request, responder: Responder) -> None:
        req = self._parse(request.body, CountTokensRequest, responder)
        if req is None:
            return
        count = max(1, sum(_content_tokens(m.content) for m in req.messages))
        responder.respond(200, r.JSON_HEADERS, r.encode({"input_tokens": count}))

    # -- the simulated generation -----------------------------------------------------------
    def _serve(self, job: Job, responder: Responder) -> Awaitable[None] | None:
        if job.max_new_tokens < 0:
            message = f"max_tokens must be at least 0, got {job.max_new_tokens}."
            responder.respond(400, [*r.JSON_HEADERS, job.headers[-1]], r.openai_error(message))
            return None
        rank = self._picker.pick()
        blocks = prompt_blocks(job.prompt, self._block_size) if job.prompt else ()
        if len(blocks) * self._block_size > job.prompt_tokens:
            blocks = blocks[: job.prompt_tokens // self._block_size]
        sim = SimRequest(job.prompt_tokens, job.max_new_tokens, job.choices, blocks=blocks)
        try:
            rank.submit(sim)
        except CapacityError as exc:
            responder.respond(400, [*r.JSON_HEADERS, job.headers[-1]], r.openai_error(str(exc)))
            return None
        if sim.finished and not job.stream:  # instant decode: answered without a task
            responder.respond(200, job.headers, full_body(job, sim.generated))
            return None
        # Progress comes from later scheduler ticks only, so attaching the signal after submit
        # misses nothing (and the instant path above never allocates one).
        sim.on_progress = progress = Progress(finish_only=not job.stream)
        if job.stream:
            return self._stream(job, sim, rank, progress, responder)
        return self._respond_when_finished(job, sim, rank, progress, responder)

    async def _respond_when_finished(
        self, job: Job, sim: SimRequest, rank: SimRank, progress: Progress, responder: Responder
    ) -> None:
        if await _wait(sim, rank, progress, responder):
            responder.respond(200, job.headers, full_body(job, sim.generated))

    async def _stream(
        self, job: Job, sim: SimRequest, rank: SimRank, progress: Progress, responder: Responder
    ) -> None:
        stream = StreamBody(job)
        responder.start(200, job.headers)
        # SGLang's streams yield their first event with the first output (serving_chat sends the
        # role chunk then): a request that waits in the queue shows it as time to first event.
        if not await _wait(sim, rank, progress, responder, first_token=True):
            return
        try:
            opening = stream.opening()
            if opening:
                await responder.write(opening)
            sent = 0
            while True:
                while sent < sim.generated:
                    # Bounded writes: a long instant answer is not built as one huge buffer,
                    # and write() applies the client's backpressure between batches.
                    upto = min(sim.generated, sent + _TOKENS_PER_WRITE)
                    await responder.write(stream.tokens(sent, upto))
                    sent = upto
                if sim.finished:
                    break
                await progress.wait()
            await responder.write(stream.closing(sim.generated))
        except ClientDisconnected:
            rank.abort(sim)
            responder.abort()  # marks the answer finished; nothing reaches a client that left
            return
        responder.end()


_TOKENS_PER_WRITE = 64
_JSON = "json"
_SSE = "sse"
_NDJSON = "ndjson"
_CONTENT_TYPES = {_JSON: r.JSON_HEADERS, _SSE: r.SSE_HEADERS, _NDJSON: r.NDJSON_HEADERS}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _judged(
    values: dict[str, Any], resolved: dict[str, Any], framing: str, responder: Responder
) -> list[tuple[bytes, bytes]] | None:
    """Answer headers carrying ``x-sim-sampling-params`` (the fields the route read, as read);
    None after answering SGLang's 400 when ``resolved`` fails ``SamplingParams.verify``."""
    extra = (SAMPLING_HEADER, r.sampling_header(values))
    problem = verify_sampling(resolved)
    if problem is not None:
        responder.respond(400, [*r.JSON_HEADERS, extra], r.openai_error(problem))
        return None
    return [*_CONTENT_TYPES[framing], extra]


def _content_tokens(content: str | list[dict[str, Any]]) -> int:
    if isinstance(content, str):
        return prompt_tokens_of_text(content)
    return sum(prompt_tokens_of_text(p["text"]) for p in content if isinstance(p.get("text"), str))


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], int)


def _vertex_prompts(instances: list[dict[str, Any]], parameters: dict[str, Any]) -> list[int] | None:
    """Prompt sizes of the batch: the first of text/input_ids/input_embeds the first instance
    sets is read from every instance (http_server.vertex_generate), else from ``parameters``."""
    for key in ("text", "input_ids", "input_embeds"):
        if instances[0].get(key):
            return [_prompt_size(instance.get(key)) for instance in instances]
    for key in ("text", "input_ids"):
        if parameters.get(key):
            value = parameters[key]
            return (
                [_prompt_size(v) for v in value]
                if isinstance(value, list) and not _is_token_list(value)
                else [_prompt_size(value)]
            )
    return None


def _prompt_size(value: Any) -> int:
    if isinstance(value, str):
        return prompt_tokens_of_text(value)
    if isinstance(value, list):
        return max(1, len(value))
    return 1


def _missing(name: str, message: str) -> dict[str, Any]:
    return {"type": "missing", "loc": [name], "msg": message, "input": None}


@dataclass(frozen=True, slots=True)
class _Reading:
    """What one combination of sampling values means: verify's verdict and the answer headers."""

    problem: str | None
    json_headers: list[tuple[bytes, bytes]]
    sse_headers: list[tuple[bytes, bytes]]
    error_headers: list[tuple[bytes, bytes]]


_readings: dict[tuple[Any, ...], _Reading] = {}
_READINGS_MAX = 1024


_sampling_tuple = operator.itemgetter(*SAMPLING_FIELDS)


def _reading(params: BaseModel) -> _Reading:
    """Cached by value tuple: each position has one type after validation (float, int or None),
    so equal tuples read alike, and most traffic repeats a handful of settings."""
    key = _sampling_tuple(params.__dict__)
    reading = _readings.get(key)
    if reading is None:
        values = dict(zip(SAMPLING_FIELDS, key, strict=True))
        extra = (SAMPLING_HEADER, r.sampling_header(values))
        reading = _Reading(
            verify_sampling(values),
            [*r.JSON_HEADERS, extra],
            [*r.SSE_HEADERS, extra],
            [*r.JSON_HEADERS, extra],
        )
        if len(_readings) >= _READINGS_MAX:
            _readings.clear()
        _readings[key] = reading
    return reading


async def _wait(
    sim: SimRequest, rank: SimRank, progress: Progress, responder: Responder, *, first_token: bool = False
) -> bool:
    """Wait for the simulated decode to finish (or to give its first token); False (request
    aborted) if the client went away first."""
    if sim.finished or (first_token and sim.generated):
        return True
    gone = asyncio.ensure_future(responder.wait_disconnected())
    try:
        while not (sim.finished or (first_token and sim.generated)):
            # Armed before yielding, so a finish in the very next tick cannot slip past.
            woken = progress.arm()
            await asyncio.wait((woken, gone), return_when=asyncio.FIRST_COMPLETED)
            if gone.done():
                rank.abort(sim)
                responder.abort()  # marks the answer finished; nothing reaches a client that left
                return False
        return True
    finally:
        gone.cancel()


def _env_path(variable: str, default: str) -> bytes:
    """A route path as SGLang takes it: ``os.environ.get(variable, default)``."""
    return os.environ.get(variable, default).encode()
