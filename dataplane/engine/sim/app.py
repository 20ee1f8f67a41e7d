"""engine-sim's HTTP surface: SGLang's OpenAI-compatible endpoints over the shared server.

A body is read as the engine reads it (``json.loads``, last key wins) and validated by the
pydantic models of ``models`` (lax); invalid bodies get FastAPI's 422, values outside
``SamplingParams.verify`` SGLang's 400. Every answer to a generation request carries
``x-sim-sampling-params``: the SPEC §2 fields as read, so tests can check exactly what a
router's injection made the engine see (SPEC §3.3). GET answers are encoded once at startup.
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dataplane.engine.sim import responses as r
from dataplane.engine.sim.answers import Job, StreamBody, full_body
from dataplane.engine.sim.models import (
    DEFAULT_MAX_TOKENS,
    SAMPLING_FIELDS,
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    SamplingParams,
    chat_prompt_tokens,
    completion_prompt_tokens,
    generate_prompt_tokens,
    verify_sampling,
)
from dataplane.engine.sim.ranks import Progress, RankPicker, SimRank
from dataplane.engine.sim.scheduler import CapacityError, SimRequest
from dataplane.http.request import ClientDisconnected, Request, Responder

SAMPLING_HEADER = b"x-sim-sampling-params"
M = TypeVar("M", bound=BaseModel)
# A route answers synchronously (returns None: no task, the rate-0 hot path) or returns the
# coroutine that finishes the answer (streams, paced decoding), which the server runs as a task.
Route = Callable[[Request, Responder], Awaitable[None] | None]
_NOT_FOUND = r.encode({"detail": "Not Found"})
_NOT_ALLOWED = r.encode({"detail": "Method Not Allowed"})
_DEFAULT_SAMPLING = SamplingParams()


class SimApp:
    """The request handler given to ``dataplane.http`` (``app(request, responder)``)."""

    def __init__(self, ranks: list[SimRank], *, model: str, info: dict[str, Any], model_path: str) -> None:
        self._ranks = ranks
        self._picker = RankPicker(ranks)
        self._model = model
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
        self._routes: dict[bytes, tuple[bytes, Route]] = {
            path: (b"GET", self._static(body)) for path, body in get_bodies.items()
        }
        self.set_server_info(info)
        self._routes[b"/health_generate"] = (b"GET", self._static(b""))
        self._routes[b"/flush_cache"] = (b"POST", self._static(b""))
        self._routes[b"/get_load"] = (b"GET", self._load)
        self._routes[b"/v1/chat/completions"] = (b"POST", self._chat)
        self._routes[b"/v1/completions"] = (b"POST", self._completion)
        self._routes[b"/generate"] = (b"POST", self._generate)

    def set_server_info(self, info: dict[str, Any]) -> None:
        """Replace ``/server_info`` (e.g. once the real port is known)."""
        body = r.encode(info)
        self._routes[b"/server_info"] = (b"GET", self._static(body))
        self._routes[b"/get_server_info"] = (b"GET", self._static(body))

    def __call__(self, request: Request, responder: Responder) -> Awaitable[None] | None:
        path = request.path
        query = path.find(b"?")
        if query >= 0:
            path = path[:query]
        route = self._routes.get(path)
        if route is None:
            responder.respond(404, r.JSON_HEADERS, _NOT_FOUND)
        elif request.method != route[0]:
            responder.respond(405, [*r.JSON_HEADERS, (b"allow", route[0])], _NOT_ALLOWED)
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
        """The engine's reading of a body: json.loads (last key wins), then pydantic lax."""
        try:
            data = _json_loads(body)
        except json.JSONDecodeError as exc:
            responder.respond(422, r.JSON_HEADERS, r.json_invalid(exc.pos, exc.msg))
            return None
        except ValueError as exc:  # not UTF-8
            responder.respond(422, r.JSON_HEADERS, r.json_invalid(0, str(exc)))
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
            req.n,
            req.stream,
            include_usage,
            headers,
        )
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
            req.n * batch,
            req.stream,
            include_usage,
            headers,
        )
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
            params.n,
            req.stream,
            False,
            headers,
        )
        return self._serve(job, responder)

    # -- the simulated generation -----------------------------------------------------------
    def _serve(self, job: Job, responder: Responder) -> Awaitable[None] | None:
        if job.max_new_tokens < 0:
            message = f"max_tokens must be at least 0, got {job.max_new_tokens}."
            responder.respond(400, [*r.JSON_HEADERS, job.headers[-1]], r.openai_error(message))
            return None
        rank = self._picker.pick()
        sim = SimRequest(job.prompt_tokens, job.max_new_tokens, job.choices)
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
        if await _wait_finished(sim, rank, progress, responder):
            responder.respond(200, job.headers, full_body(job, sim.generated))

    async def _stream(
        self, job: Job, sim: SimRequest, rank: SimRank, progress: Progress, responder: Responder
    ) -> None:
        stream = StreamBody(job)
        responder.start(200, job.headers)
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


_decoder = json.JSONDecoder()
_TOKENS_PER_WRITE = 64


def _json_loads(body: bytes) -> Any:
    """Exactly ``json.loads(body)``, minus its encoding sniffing for the usual UTF-8 object.

    ``json.loads`` picks UTF-8 for bytes that start with ``{`` followed by a non-NUL byte
    (``json.detect_encoding``) and decodes with ``surrogatepass``; anything else goes the
    long way, so UTF-16/32 bodies read exactly as the engine reads them.
    """
    if body[:1] == b"{" and body[1:2] != b"\x00":
        return _decoder.decode(body.decode("utf-8", "surrogatepass"))
    return json.loads(body)


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


async def _wait_finished(sim: SimRequest, rank: SimRank, progress: Progress, responder: Responder) -> bool:
    """Wait for the simulated decode; False (request aborted) if the client went away first."""
    gone = asyncio.ensure_future(responder.wait_disconnected())
    try:
        while not sim.finished:
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
