"""What SGLang 0.5.23 samples with, per route, for the raw bytes of one request body.

Each function takes the body exactly as the engine receives it and follows the wheel's own
code (``wheel.py`` says how it is loaded): ``orjson.loads`` (``http_server.ORJSONRequest``),
the route's pydantic request model, the route's conversion to a ``sampling_params`` dict,
``TokenizerManager._create_tokenized_object``'s merge with ``--preferred-sampling-params``,
then the engine's ``SamplingParams(**kwargs)`` and its ``verify``. The answer is a list of
:class:`Sampling` (one per sequence the engine schedules: a batch or ``n`` gives several), or
:class:`Refused` when the engine answers an error instead of generating.

Stubbed inputs, none of which can change a SPEC §2 field:
* ``stop=[]`` and ``tool_call_constraint=None`` for ``to_sampling_params``: the real ones come
  from the chat template and tools and only fill ``stop``/grammar keys.
* ``generation_config`` (the model's ``generation_config.json`` defaults, ``{}`` unless given)
  and ``preferred`` (``--preferred-sampling-params``, unset by default) are the two server-side
  sources of defaults; they only change fields the client did not set (``from_body`` False).
* ``SamplingParams.normalize(tokenizer)`` is not called: it only measures stop strings.
  ``verify`` gets a vocabulary of 2**31 tokens: it reads the size only for ``logit_bias`` keys.
* Anthropic's conversion runs on a serving object whose chat server says its template keeps
  reasoning history and accepts any thinking mode (only reasoning/template fields depend on it).
* Transcription: SGLang's model adapter maps the form's ``temperature`` into the dict
  (``{"temperature": t}``; Qwen3-ASR alone turns 0.0 into 0.01): the oracle gives the value the
  route hands to the adapter.
Where the engine would refuse a body for reasons the oracle skips (tokenizer, template, model
limits), the oracle accepts it: it never refuses what the engine would sample.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import functools
import typing
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic

from tests.fakes.sglang_engine import wheel

FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "n",
)
"""SPEC §2, in its order."""

_VOCAB = 1 << 31


@dataclass(frozen=True, slots=True)
class FieldReading:
    """One §2 field as the engine samples with it.

    ``value`` is what ``SamplingParams`` was given for it (before its own rewrites: a
    temperature below 1e-6 becomes greedy top_k 1, top_k -1 the whole vocabulary), or, when
    nothing was given, the engine's default; ``from_body`` says whether the client set it.
    """

    value: Any
    from_body: bool


@dataclass(frozen=True, slots=True)
class Sampling:
    """One sequence the engine schedules, with the SamplingParams it samples it with."""

    fields: dict[str, FieldReading]
    params: Any  # the engine's own SamplingParams after __post_init__ (verify passed)

    def __getitem__(self, name: str) -> FieldReading:
        return self.fields[name]

    def value(self, name: str) -> Any:
        return self.fields[name].value

    def from_body(self, name: str) -> bool:
        return self.fields[name].from_body


@dataclass(frozen=True, slots=True)
class Refused:
    """The engine answers an error: ``stage`` is where (json, validation, gate, conversion,
    normalize, sampling_params, verify), ``reason`` the engine's message."""

    stage: str
    reason: str


Reading = list[Sampling] | Refused


# -- the steps every route shares -------------------------------------------------------------
def _json(body: bytes) -> Any:
    # http_server.ORJSONRequest.json(): orjson.loads(await self.body()).
    return orjson.loads(body)


def _sample(
    sampling_params: Any, client: set[str] | None, preferred: dict[str, Any] | None
) -> Sampling | Refused:
    """TokenizerManager._create_tokenized_object, then SamplingParams and verify.

    ``client`` names the §2 fields the client set; None means "every non-null key of the
    dict" (routes whose dict holds only what the client sent).
    """
    # tokenizer_manager.py: "if self.preferred_sampling_params: sampling_kwargs =
    # {**self.preferred_sampling_params, **obj.sampling_params} else: sampling_kwargs =
    # dict(obj.sampling_params)" (pinned by tests/unit/sglang_oracle/test_wheel_pins.py).
    try:
        kwargs = {**preferred, **sampling_params} if preferred else dict(sampling_params)
    except (TypeError, ValueError) as exc:
        return Refused("sampling_params", str(exc))
    params_cls = wheel.module("sglang.srt.sampling.sampling_params").SamplingParams
    # Only the wheel's code runs in these two steps; whatever it raises, the engine answers an
    # error (a 400 for ValueError, a 500 otherwise). A guarded module used is not a refusal.
    try:
        params = params_cls(**kwargs)
    except wheel.GuardedUse:
        raise
    except Exception as exc:
        return Refused("sampling_params", f"{type(exc).__name__}: {exc}")
    try:
        params.verify(_VOCAB)
    except wheel.GuardedUse:
        raise
    except Exception as exc:
        return Refused("verify", str(exc))
    if client is None:
        given = sampling_params if isinstance(sampling_params, dict) else kwargs
        client = {f for f in FIELDS if given.get(f) is not None}
    fields = {}
    for name in FIELDS:
        raw = kwargs.get(name)
        fields[name] = FieldReading(raw if raw is not None else getattr(params, name), name in client)
    return Sampling(fields, params)


def _samples(sampling_params: Any, client: set[str] | None, preferred: dict[str, Any] | None) -> Reading:
    one = _sample(sampling_params, client, preferred)
    return one if isinstance(one, Refused) else [one]


class _Refusal(Exception):
    def __init__(self, refused: Refused) -> None:
        self.refused = refused


def _validate(model: Any, data: Any) -> Any:
    """FastAPI's validation of the body parameter (``model_validate``/``TypeAdapter``, python mode).

    A wheel validator that raises something other than a validation error (e.g. ``values.get``
    on a body that is a JSON array) escapes pydantic, and FastAPI answers 500: refused too.
    """
    validate = model.model_validate if hasattr(model, "model_validate") else model.validate_python
    try:
        return validate(data)
    except pydantic.ValidationError as exc:
        raise _Refusal(Refused("validation", str(exc))) from exc
    except wheel.GuardedUse:
        raise
    except Exception as exc:
        raise _Refusal(Refused("validation", f"{type(exc).__name__}: {exc}")) from exc


def _client_fields(request: pydantic.BaseModel) -> set[str]:
    return {f for f in FIELDS if f in request.model_fields_set and getattr(request, f, None) is not None}


def _guarded(route: Callable[..., Reading]) -> Callable[..., Reading]:
    """Body-level refusals (orjson, the route's validation) as :class:`Refused`; anything else
    (a guarded module used, a bug of the oracle) propagates and fails the test."""

    @functools.wraps(route)
    def read(*args: Any, **kwargs: Any) -> Reading:
        try:
            with warnings.catch_warnings():
                # The wheel's own deprecation notices (max_tokens, FastAPI's ORJSONResponse).
                warnings.simplefilter("ignore")
                return route(*args, **kwargs)
        except orjson.JSONDecodeError as exc:
            return Refused("json", str(exc))
        except _Refusal as refusal:
            return refusal.refused

    return read


def _protocol() -> Any:
    return wheel.module("sglang.srt.entrypoints.openai.protocol")


# -- OpenAI chat and completions ---------------------------------------------------------------
def _chat_samples(
    request: Any, generation_config: dict[str, Any] | None, preferred: dict[str, Any] | None
) -> Reading:
    # serving_chat.py _convert_to_internal_request: request.to_sampling_params(stop=...,
    # model_generation_config=self.default_sampling_params, tool_call_constraint=...).
    try:
        params = request.to_sampling_params(
            stop=[], model_generation_config=generation_config or {}, tool_call_constraint=None
        )
    except ValueError as exc:
        return Refused("conversion", str(exc))
    return _samples(params, _client_fields(request), preferred)


@_guarded
def chat(
    body: bytes, *, generation_config: dict[str, Any] | None = None, preferred: dict[str, Any] | None = None
) -> Reading:
    """``POST /v1/chat/completions`` and ``POST /invocations`` (both take ChatCompletionRequest)."""
    request = _validate(_protocol().ChatCompletionRequest, _json(body))
    return _chat_samples(request, generation_config, preferred)


@functools.cache
def _completion_sampling_params() -> Callable[[Any, Any], dict[str, Any]]:
    """``OpenAIServingCompletion._build_sampling_params``, compiled from the wheel's text.

    Its module imports the scheduler; the method reads nothing from ``self``.
    """
    relative = "srt/entrypoints/openai/serving_completions.py"
    method = wheel.function_def(relative, "_build_sampling_params")
    namespace = {
        "Any": Any,
        "CompletionRequest": _protocol().CompletionRequest,
        "convert_json_schema_to_str": _protocol().convert_json_schema_to_str,
    }
    built: Callable[[Any, Any], dict[str, Any]] = wheel.compile_defs(relative, [method], namespace)[
        "_build_sampling_params"
    ]
    return built


@_guarded
def completions(body: bytes, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST /v1/completions``: CompletionRequest, its sampling fields are not Optional."""
    request = _validate(_protocol().CompletionRequest, _json(body))
    try:
        params = _completion_sampling_params()(None, request)
    except ValueError as exc:
        return Refused("conversion", str(exc))
    return _samples(params, _client_fields(request), preferred)


# -- responses and Anthropic messages ----------------------------------------------------------
@_guarded
def responses(
    body: bytes, *, generation_config: dict[str, Any] | None = None, preferred: dict[str, Any] | None = None
) -> Reading:
    """``POST /v1/responses``: ResponsesRequest.to_sampling_params (no ``n``; temperature 0.7)."""
    request = _validate(_protocol().ResponsesRequest, _json(body))
    # serving_responses.py: request.to_sampling_params(None, self.default_sampling_params, stop=...)
    try:
        params = request.to_sampling_params(None, generation_config or {}, stop=request.stop)
    except ValueError as exc:
        return Refused("conversion", str(exc))
    return _samples(params, _client_fields(request), preferred)


class _ChatServerStub:
    """The three questions AnthropicServing asks its chat server while converting; the answers
    decide how prior thinking is replayed and whether reasoning is on, never a sampling field."""

    @staticmethod
    def supports_native_reasoning_history() -> bool:
        return True

    @staticmethod
    def wrap_reasoning_history(text: str) -> str:
        return text

    @staticmethod
    def apply_reasoning_enabled(_request: Any, _enabled: bool) -> None:
        return None


@_guarded
def messages(
    body: bytes, *, generation_config: dict[str, Any] | None = None, preferred: dict[str, Any] | None = None
) -> Reading:
    """``POST /v1/messages``: AnthropicMessagesRequest, converted to a chat request."""
    anthropic = wheel.module("sglang.srt.entrypoints.anthropic.serving")
    request = _validate(anthropic.AnthropicMessagesRequest, _json(body))
    serving = anthropic.AnthropicServing.__new__(anthropic.AnthropicServing)
    serving.openai_serving_chat = _ChatServerStub()
    serving._merge_inline_system = False
    try:
        # handle_messages answers 400 for any exception of the conversion.
        chat_request = serving._convert_to_chat_completion_request(request)
    except Exception as exc:
        return Refused("conversion", str(exc))
    return _chat_samples(chat_request, generation_config, preferred)


# -- Ollama ------------------------------------------------------------------------------------
def _ollama_options(options: dict[str, Any] | None) -> dict[str, Any]:
    serving = wheel.module("sglang.srt.entrypoints.ollama.serving").OllamaServing
    # An instance method that reads nothing from self.
    params: dict[str, Any] = serving._convert_options_to_sampling_params(None, options)
    return params


@_guarded
def ollama_chat(body: bytes, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST /api/chat``: OllamaChatRequest, its ``options`` mapped to sampling params."""
    request = _validate(wheel.module("sglang.srt.entrypoints.ollama.protocol").OllamaChatRequest, _json(body))
    return _samples(_ollama_options(request.options), None, preferred)


@_guarded
def ollama_generate(body: bytes, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST /api/generate``: OllamaGenerateRequest; an empty prompt is answered unsampled."""
    request = _validate(
        wheel.module("sglang.srt.entrypoints.ollama.protocol").OllamaGenerateRequest, _json(body)
    )
    # ollama/serving.py handle_generate: prompt (with system) empty or blank -> an empty answer.
    prompt = request.prompt
    if request.system:
        prompt = f"{request.system}\n\n{prompt}"
    if not prompt or not prompt.strip():
        return []
    return _samples(_ollama_options(request.options), None, preferred)


# -- /generate and Vertex ----------------------------------------------------------------------
_IO_STRUCT = "srt/managers/io_struct.py"
# GenerateReqInput's batch logic (normalize_batch_and_arguments) as the wheel writes it.
_GENERATE_METHODS = (
    "_validate_inputs",
    "_determine_batch_size",
    "_sampling_params_beam_width",
    "_handle_beam_search_parallel_sampling",
    "_handle_parallel_sampling",
    "_expand_inputs",
    "_normalize_sampling_params",
)


@functools.cache
def _generate_fields() -> dict[str, tuple[str, Any]]:
    """GenerateReqInput's dataclass fields: name -> (annotation source, default source)."""
    out: dict[str, tuple[str, Any]] = {}
    for node in wheel.class_def(_IO_STRUCT, "GenerateReqInput").body:
        if isinstance(node, ast.AnnAssign) and hasattr(node.target, "id"):
            out[node.target.id] = (
                ast.unparse(node.annotation),
                None if node.value is None else ast.unparse(node.value),
            )
    return out


@functools.cache
def _shape_class() -> type:
    """A plain object carrying GenerateReqInput's batch methods, compiled from the wheel."""
    cls = wheel.class_def(_IO_STRUCT, "GenerateReqInput")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in _GENERATE_METHODS]
    assert {m.name for m in methods} == set(_GENERATE_METHODS), "GenerateReqInput moved its batch logic"
    namespace = wheel.compile_defs(_IO_STRUCT, methods, {})
    return type("GenerateShape", (), {name: namespace[name] for name in _GENERATE_METHODS})


@functools.cache
def _generate_adapters() -> dict[str, pydantic.TypeAdapter[Any]]:
    """FastAPI's validation of the GenerateReqInput fields that shape the batch, with the
    annotations the wheel declares (the other fields do not reach the sampling parameters)."""
    names = {
        "Any": Any,
        "Dict": dict,
        "List": list,
        "Optional": typing.Optional,
        "Union": typing.Union,
    }
    fields = _generate_fields()
    return {
        name: pydantic.TypeAdapter(eval(fields[name][0], names))
        for name in ("text", "input_embeds", "sampling_params")
    }


# More sequences than this (a client's n of a million) are read as the distinct sampling objects
# they repeat, not expanded one by one.
_MAX_SEQUENCES = 4096


def _generate_from_fields(values: dict[str, Any], preferred: dict[str, Any] | None) -> Reading:
    """GenerateReqInput(**values) through normalize_batch_and_arguments and obj[i]."""
    shape = _shape_class()()
    for name, default in _generate_defaults().items():
        setattr(shape, name, values.get(name, default))
    try:
        shape._validate_inputs()
        shape._determine_batch_size()
        shape._handle_parallel_sampling()
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return Refused("normalize", str(exc))
    if shape.is_single:
        # _normalize_single_inputs: "if self.sampling_params is None: self.sampling_params = {}".
        items = [{} if shape.sampling_params is None else shape.sampling_params]
    else:
        # _normalize_batch_inputs: num = batch_size (x parallel_sample_num when it is not 1).
        num = (
            shape.batch_size
            if shape.parallel_sample_num == 1
            else shape.batch_size * shape.parallel_sample_num
        )
        try:
            if num > _MAX_SEQUENCES and isinstance(num, int):
                # The engine would schedule ``num`` sequences (or exhaust its memory trying);
                # they repeat the sampling objects below, which are all the oracle must read.
                params = shape.sampling_params
                items = list({id(p): p for p in (params if isinstance(params, list) else [params])}.values())
            else:
                shape._expand_inputs(num)  # first of _normalize_batch_inputs' steps (a float n fails here)
                shape._normalize_sampling_params(num)
                items = [shape.sampling_params[i] for i in range(num)]  # obj[i] for i in range(batch_size)
        # OverflowError: a sequence count past the index range (batch 2 x n -2**63 makes
        # ``[params] * num`` raise), which FastAPI answers with a 500: nothing is sampled.
        except (IndexError, TypeError, ValueError, OverflowError) as exc:
            return Refused("normalize", str(exc))
    out: list[Sampling] = []
    for item in items:
        one = _sample(item, None, preferred)
        if isinstance(one, Refused):
            return one
        out.append(one)
    return out


@functools.cache
def _generate_defaults() -> dict[str, Any]:
    """The dataclass defaults (None/False/literals are all the batch logic reads)."""
    return {name: _literal_default(default) for name, (_annotation, default) in _generate_fields().items()}


def _literal_default(source: str | None) -> Any:
    if source is None:
        return None
    try:
        return ast.literal_eval(source)
    except ValueError:
        return None  # field(default=None, ...) and factories: None, as the batch logic reads them


@_guarded
def generate(body: bytes, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST``/``PUT /generate``: GenerateReqInput, the schema gate, then the batch logic."""
    data = _json(body)
    if not isinstance(data, dict):
        return Refused("validation", "GenerateReqInput must be an object")
    values = dict(data)
    for name, adapter in _generate_adapters().items():
        if name in values:
            values[name] = _validate(adapter, values[name])
    # http_server.generate_request: generate_contract_error(await request.json()) -> 400.
    error = wheel.module("sglang.srt.entrypoints.api_contract").generate_contract_error(data)
    if error is not None:
        return Refused("gate", error)
    return _generate_from_fields(values, preferred)


class _GenerateReqInputRecorder:
    """What ``vertex_generate`` builds: keyword arguments checked against the dataclass's fields
    (an unknown one is the dataclass's TypeError), then kept for the /generate batch logic."""

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(_generate_fields())
        if unknown:
            raise TypeError(
                f"GenerateReqInput.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}"
            )
        self.values = kwargs


class _RawRequest:
    """The Starlette request as ``generate_request`` reads it: ``await request.json()``."""

    def __init__(self, data: Any) -> None:
        self._data = data

    async def json(self) -> Any:
        return self._data


@functools.cache
def _vertex() -> tuple[Any, Any, list[Any]]:
    """(VertexGenerateReqInput, the vertex_generate handler, the recorded GenerateReqInputs).

    Compiled from the wheel: ``io_struct.BaseReq``/``VertexGenerateReqInput`` with
    ``msgspec_utils.msgspec_struct_pydantic_core_schema`` (how FastAPI validates the body), and
    ``http_server.vertex_generate``/``generate_request``, whose GenerateReqInput is the recorder
    above and whose ``serve_generate_request`` (past the gate) records instead of generating.
    """
    import msgspec
    from fastapi import Body, Request
    from fastapi.responses import ORJSONResponse, Response
    from pydantic_core import core_schema

    utils = "srt/utils/msgspec_utils.py"
    schema = wheel.compile_defs(
        utils,
        [wheel.function_def(utils, "msgspec_struct_pydantic_core_schema")],
        {"msgspec": msgspec, "core_schema": core_schema, "Any": Any},
    )["msgspec_struct_pydantic_core_schema"]
    vertex_cls = wheel.compile_defs(
        _IO_STRUCT,
        [wheel.class_def(_IO_STRUCT, "BaseReq"), wheel.class_def(_IO_STRUCT, "VertexGenerateReqInput")],
        {
            "msgspec": msgspec,
            "msgspec_struct_pydantic_core_schema": schema,
            "Any": Any,
            "Optional": typing.Optional,
            "List": list,
            "Dict": dict,
        },
    )["VertexGenerateReqInput"]
    built: list[Any] = []

    async def serve_generate_request(obj: Any, _request: Any) -> Any:
        built.append(obj)
        return None

    server = "srt/entrypoints/http_server.py"
    handlers: dict[str, Any] = {
        "Annotated": typing.Annotated,
        "Body": Body,
        "Request": Request,
        "Response": Response,
        "ORJSONResponse": ORJSONResponse,
        "orjson": orjson,
        "VertexGenerateReqInput": vertex_cls,
        "GenerateReqInput": _GenerateReqInputRecorder,
        "generate_contract_error": wheel.module(
            "sglang.srt.entrypoints.api_contract"
        ).generate_contract_error,
        "serve_generate_request": serve_generate_request,
    }
    compiled = wheel.compile_defs(
        server,
        [wheel.function_def(server, "generate_request"), wheel.function_def(server, "vertex_generate")],
        handlers,
    )
    return pydantic.TypeAdapter(vertex_cls), compiled["vertex_generate"], built


@_guarded
def vertex(body: bytes, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST /vertex_generate`` (``AIP_PREDICT_ROUTE``): ``parameters`` spread into GenerateReqInput.

    The gate in ``generate_request`` reads the *Vertex* body (``await request.json()``), whose
    top level has no GenerateReqInput keys: ``parameters.sampling_params`` reaches
    ``SamplingParams`` ungated.
    """
    adapter, handler, built = _vertex()
    data = _json(body)
    request = _validate(adapter, data)
    built.clear()
    try:
        answer = _run_now(handler(request, _RawRequest(data)))
    except TypeError as exc:
        return Refused("conversion", str(exc))
    if not built:
        if isinstance(answer, list):  # "if not vertex_req.instances: return []"
            return []
        return Refused("gate", bytes(getattr(answer, "body", b"")).decode())
    return _generate_from_fields(built[0].values, preferred)


def _run_now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a handler coroutine that never waits (its awaits are our recorders)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("handler awaited real I/O")


# -- transcription (multipart form) ------------------------------------------------------------
@functools.cache
def _transcription_app() -> tuple[Any, list[dict[str, Any]]]:
    """A FastAPI app serving the wheel's own ``openai_v1_audio_transcriptions`` handler (its
    ``Form``/``File`` parameters are the form parsing), whose transcription server records the
    arguments the handler passes instead of running a model."""
    from fastapi import FastAPI, File, Form, Request, UploadFile
    from fastapi.responses import ORJSONResponse, Response

    calls: list[dict[str, Any]] = []

    class Recorder:
        async def create_transcription(self, **kwargs: Any) -> Response:
            raw = kwargs.pop("raw_request")
            form = await raw.form()
            kwargs["form_has_temperature"] = form.get("temperature") not in (None, "")
            calls.append(kwargs)
            return Response(status_code=200)

    app = FastAPI()
    app.state.openai_serving_transcription = Recorder()
    server = "srt/entrypoints/http_server.py"
    namespace: dict[str, Any] = {
        "File": File,
        "Form": Form,
        "UploadFile": UploadFile,
        "Request": Request,
        "Optional": typing.Optional,
        "List": list,
        "ORJSONResponse": ORJSONResponse,
    }
    handler = wheel.function_def(server, "openai_v1_audio_transcriptions")
    compiled = wheel.compile_defs(server, [handler], namespace)
    app.post("/v1/audio/transcriptions")(compiled["openai_v1_audio_transcriptions"])
    return app, calls


async def _asgi_post(app: Any, path: str, body: bytes, content_type: str) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", content_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def _run_loop(coroutine: Coroutine[Any, Any, int]) -> int:
    """asyncio.run, on a worker thread when this thread already runs a loop (async tests)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@_guarded
def transcription(body: bytes, content_type: str, *, preferred: dict[str, Any] | None = None) -> Reading:
    """``POST /v1/audio/transcriptions``: multipart form, ``temperature: float = Form(0.0)``."""
    app, calls = _transcription_app()
    calls.clear()
    status = _run_loop(_asgi_post(app, "/v1/audio/transcriptions", body, content_type))
    if not calls:
        return Refused("validation", f"HTTP {status}")
    call = calls[0]
    client = {"temperature"} if call["form_has_temperature"] else set()
    return _samples({"temperature": call["temperature"]}, client, preferred)


# -- by dialect --------------------------------------------------------------------------------
def ollama(body: bytes, *, path: str = "/api/chat", preferred: dict[str, Any] | None = None) -> Reading:
    """The Ollama dialect: ``/api/chat`` or ``/api/generate`` (their fields sit alike)."""
    return (ollama_generate if path.endswith("generate") else ollama_chat)(body, preferred=preferred)


DIALECTS: dict[str, Callable[..., Reading]] = {
    "chat": chat,
    "completions": completions,
    "generate": generate,
    "responses": responses,
    "messages": messages,
    "ollama": ollama_chat,
    "vertex": vertex,
}
"""The JSON dialects of SPEC §5.1 -> their reading (transcription takes a content type too)."""

ROUTES: dict[tuple[str, str], Callable[..., Reading]] = {
    ("POST", "/v1/chat/completions"): chat,
    ("POST", "/invocations"): chat,
    ("POST", "/v1/completions"): completions,
    ("POST", "/generate"): generate,
    ("PUT", "/generate"): generate,
    ("POST", "/v1/responses"): responses,
    ("POST", "/v1/messages"): messages,
    ("POST", "/api/chat"): ollama_chat,
    ("POST", "/api/generate"): ollama_generate,
    ("POST", "/vertex_generate"): vertex,
}
"""The engine's default paths (SPEC §5.1) -> their reading; transcription is separate."""
