"""The SGLang 0.5.23 oracle reads bodies as the real engine does (reference §G), route by route."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes import sglang_engine as engine

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)

CHAT = b'"model":"m","messages":[{"role":"user","content":"hi"}]'
# Keys the routes read, so random bodies reach past validation into the conversions.
_KEYS = [
    *engine.FIELDS,
    "model",
    "messages",
    "role",
    "content",
    "prompt",
    "input",
    "text",
    "input_ids",
    "max_tokens",
    "sampling_params",
    "options",
    "instances",
    "parameters",
    "stream",
    "stop",
    "num_predict",
    "seed",
    "system",
]


def _chat(extra: bytes) -> bytes:
    return b"{" + CHAT + extra + b"}"


def _one(reading: engine.Reading) -> engine.Sampling:
    assert isinstance(reading, list) and len(reading) == 1, reading
    return reading[0]


def _refused(reading: engine.Reading, stage: str) -> str:
    assert isinstance(reading, engine.Refused), reading
    assert reading.stage == stage, reading
    return reading.reason


def _form(fields: list[tuple[str, bytes]], *, file: bool = True) -> tuple[bytes, str]:
    boundary = "oracle-boundary"
    parts = [(f'name="{k}"', v) for k, v in fields]
    if file:
        parts.insert(0, ('name="file"; filename="a.wav"\r\nContent-Type: audio/wav', b"RIFF"))
    body = b"".join(
        f"--{boundary}\r\nContent-Disposition: form-data; {head}\r\n\r\n".encode() + value + b"\r\n"
        for head, value in parts
    )
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


# -- the body parser: orjson ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        _chat(b',"temperature":NaN'),
        _chat(b',"temperature":Infinity'),
        _chat(b',"temperature":1e400'),
        b"\xef\xbb\xbf" + _chat(b""),
        _chat(b"").decode().encode("utf-16"),
        _chat(b"").decode().encode("utf-16-le"),
        _chat(b"").decode().encode("utf-32"),
        _chat(b',"user":"\\ud800"'),
    ],
    ids=["NaN", "Infinity", "1e400", "utf8-bom", "utf16-bom", "utf16-le", "utf32", "lone-surrogate"],
)
def test_orjson_refuses_what_json_loads_would_take(body: bytes) -> None:
    """NaN/Infinity/1e400 literals, BOMs, UTF-16/32 and lone surrogates are refused by the parser."""
    _refused(engine.chat(body), "json")


def test_last_repeated_key_wins() -> None:
    """A repeated key is read as its last occurrence (orjson, like json.loads)."""
    sampling = _one(engine.chat(_chat(b',"temperature":0.2,"temperature":1.5')))
    assert sampling["temperature"] == engine.FieldReading(1.5, True)


# -- chat -----------------------------------------------------------------------------------------
def test_chat_reads_lax_strings_and_bools_and_defaults_the_rest() -> None:
    """Chat's pydantic is lax: "0.5" is 0.5, true is 1; unset fields come from the engine's defaults."""
    sampling = _one(engine.chat(_chat(b',"temperature":"0.5","top_k":true,"top_p":null')))
    assert sampling["temperature"] == engine.FieldReading(0.5, True)
    assert sampling["top_k"] == engine.FieldReading(1, True)
    assert sampling["top_p"] == engine.FieldReading(1.0, False)
    assert sampling["n"] == engine.FieldReading(1, False)


def test_chat_defaults_come_from_the_generation_config_not_preferred_params() -> None:
    """An omitted chat field takes the model's generation_config; --preferred-sampling-params cannot reach it."""
    sampling = _one(
        engine.chat(
            _chat(b""), generation_config={"temperature": 0.6}, preferred={"temperature": 0.3, "top_p": 0.5}
        )
    )
    assert sampling["temperature"] == engine.FieldReading(0.6, False)
    assert sampling["top_p"] == engine.FieldReading(1.0, False)


def test_chat_refuses_null_for_non_optional_fields_and_verify_failures() -> None:
    """frequency_penalty/presence_penalty/n are not Optional; verify refuses top_p 0."""
    _refused(engine.chat(_chat(b',"n":null')), "validation")
    assert "top_p must be in (0, 1]" in _refused(engine.chat(_chat(b',"top_p":0')), "verify")


def test_zero_temperature_is_read_as_sent_and_sampled_greedy() -> None:
    """temperature 0 is what the body says; SamplingParams turns it into greedy top_k 1."""
    sampling = _one(engine.chat(_chat(b',"temperature":0')))
    assert sampling["temperature"] == engine.FieldReading(0, True)
    assert (sampling.params.temperature, sampling.params.top_k) == (1.0, 1)


# -- completions ----------------------------------------------------------------------------------
def test_completions_refuse_null_temperature() -> None:
    """CompletionRequest declares temperature: float = 1.0, so null is a validation error."""
    reason = _refused(engine.completions(b'{"model":"m","prompt":"hi","temperature":null}'), "validation")
    assert "temperature" in reason


def test_completions_default_and_read_strings() -> None:
    """Omitted completion fields are the model's declared defaults; numeric strings are read."""
    sampling = _one(engine.completions(b'{"model":"m","prompt":"hi","top_k":"40"}'))
    assert sampling["top_k"] == engine.FieldReading(40, True)
    assert sampling["temperature"] == engine.FieldReading(1.0, False)


# -- /generate ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        b'{"top_k":40.0}',
        b'{"top_k":4e1}',
        b'{"temperature":true}',
        b'{"temperature":"0.5"}',
        b'{"n":1.0}',
        b'{"x":1}',
    ],
)
def test_generate_gate_refuses_non_numbers_and_non_integers(params: bytes) -> None:
    """The /generate gate wants JSON numbers, JSON integers for top_k/n, and known keys only."""
    _refused(engine.generate(b'{"text":"hi","sampling_params":' + params + b"}"), "gate")


def test_generate_reads_numbers_and_null_as_default() -> None:
    """Numbers pass the gate as they are; null is the engine's default (not from the body)."""
    sampling = _one(engine.generate(b'{"text":"hi","sampling_params":{"top_k":40,"temperature":null}}'))
    assert sampling["top_k"] == engine.FieldReading(40, True)
    assert sampling["temperature"] == engine.FieldReading(1.0, False)


def test_generate_batch_gives_one_reading_per_element() -> None:
    """A list sampling_params samples prompt i with element i; n multiplies the sequences."""
    reading = engine.generate(
        b'{"text":["a","b"],"sampling_params":[{"temperature":0.1},{"temperature":0.2}]}'
    )
    assert isinstance(reading, list)
    assert [s.value("temperature") for s in reading] == [0.1, 0.2]
    doubled = engine.generate(b'{"text":"a","sampling_params":{"temperature":0.3,"n":2}}')
    assert isinstance(doubled, list) and [s.value("n") for s in doubled] == [2, 2]


def test_generate_batch_shorter_than_prompts_is_refused() -> None:
    """A batch whose list has fewer elements than prompts fails in GenerateReqInput[i]."""
    _refused(engine.generate(b'{"text":["a","b"],"sampling_params":[{"temperature":0.1}]}'), "normalize")


def test_generate_single_prompt_with_a_list_reads_neither_element_field() -> None:
    """One prompt + a one-element list: dict(list) turns {"stop","temperature"} into stop="temperature"."""
    sampling = _one(engine.generate(b'{"text":"hi","sampling_params":[{"stop":"x","temperature":0.5}]}'))
    assert sampling["temperature"] == engine.FieldReading(1.0, False)
    assert sampling.params.stop_strs == "temperature"


def test_generate_preferred_params_fill_only_absent_fields() -> None:
    """--preferred-sampling-params supplies fields the /generate body leaves out."""
    sampling = _one(
        engine.generate(
            b'{"text":"hi","sampling_params":{"top_p":0.9}}', preferred={"temperature": 0.3, "top_p": 0.5}
        )
    )
    assert sampling["temperature"] == engine.FieldReading(0.3, False)
    assert sampling["top_p"] == engine.FieldReading(0.9, True)


# -- responses ------------------------------------------------------------------------------------
def test_responses_default_temperature_is_0_7_and_n_is_not_read() -> None:
    """ResponsesRequest: omitted temperature is 0.7; it has no n field (1 whatever is sent)."""
    sampling = _one(engine.responses(b'{"model":"m","input":"hi","n":4}'))
    assert sampling["temperature"] == engine.FieldReading(0.7, False)
    assert sampling["n"] == engine.FieldReading(1, False)
    read = _one(engine.responses(b'{"model":"m","input":"hi","temperature":0.2,"min_p":"0.1"}'))
    assert read["temperature"] == engine.FieldReading(0.2, True)
    assert read["min_p"] == engine.FieldReading(0.1, True)


# -- Anthropic messages ---------------------------------------------------------------------------
def test_messages_carry_temperature_top_p_top_k_to_the_chat_request() -> None:
    """Anthropic's temperature/top_p/top_k reach the chat request; min_p and n are not read."""
    body = (
        b'{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}],'
        b'"temperature":0.3,"top_k":7,"top_p":"0.9","min_p":0.5,"n":3}'
    )
    sampling = _one(engine.messages(body))
    assert sampling["temperature"] == engine.FieldReading(0.3, True)
    assert sampling["top_k"] == engine.FieldReading(7, True)
    assert sampling["top_p"] == engine.FieldReading(0.9, True)
    assert sampling["min_p"] == engine.FieldReading(0.0, False)
    assert sampling["n"] == engine.FieldReading(1, False)


def test_messages_require_max_tokens() -> None:
    """AnthropicMessagesRequest refuses a body without max_tokens."""
    _refused(engine.messages(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'), "validation")


# -- Ollama ---------------------------------------------------------------------------------------
OLLAMA = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"options":'


def test_ollama_options_are_passed_untyped() -> None:
    """options is Dict[str, Any]: true stays True, 40.5 stays a float top_k; min_p/repeat_penalty are ignored."""
    body = (
        OLLAMA + b'{"temperature":true,"top_k":40.5,"min_p":0.3,"repeat_penalty":1.5,"presence_penalty":0.5}}'
    )
    sampling = _one(engine.ollama_chat(body))
    assert sampling["temperature"].value is True and sampling.from_body("temperature")
    assert sampling["top_k"] == engine.FieldReading(40.5, True)
    assert sampling["min_p"] == engine.FieldReading(0.0, False)
    assert sampling["repetition_penalty"] == engine.FieldReading(1.0, False)
    assert sampling["presence_penalty"] == engine.FieldReading(0.5, True)


def test_ollama_refuses_string_numbers_and_seed() -> None:
    """A string reaches SamplingParams and fails its comparisons; seed is no SamplingParams field."""
    _refused(engine.ollama_chat(OLLAMA + b'{"temperature":"0.5"}}'), "sampling_params")
    _refused(engine.ollama_chat(OLLAMA + b'{"seed":1}}'), "sampling_params")


def test_ollama_generate_blank_prompt_samples_nothing() -> None:
    """/api/generate answers a blank prompt without generating; otherwise options are read alike."""
    assert engine.ollama_generate(b'{"model":"m","prompt":"  ","options":{"temperature":"x"}}') == []
    sampling = _one(
        engine.ollama(b'{"model":"m","prompt":"hi","options":{"top_p":0.5}}', path="/api/generate")
    )
    assert sampling["top_p"] == engine.FieldReading(0.5, True)


# -- Vertex ---------------------------------------------------------------------------------------
def test_vertex_parameters_reach_sampling_params_ungated() -> None:
    """The gate reads the Vertex body's top level: bools and 40.0 under parameters.sampling_params pass."""
    body = b'{"instances":[{"text":"hi"}],"parameters":{"sampling_params":{"temperature":true,"top_k":40.0}}}'
    sampling = _one(engine.vertex(body))
    assert sampling["temperature"].value is True
    assert sampling["top_k"] == engine.FieldReading(40.0, True)


def test_vertex_top_level_sampling_params_are_gated_and_unknown_parameters_refused() -> None:
    """A top-level sampling_params is gated (then unused); a parameter GenerateReqInput lacks is a TypeError."""
    _refused(engine.vertex(b'{"instances":[{"text":"hi"}],"sampling_params":{"temperature":"0.3"}}'), "gate")
    _refused(engine.vertex(b'{"instances":[{"text":"hi"}],"parameters":{"foo":1}}'), "conversion")
    assert engine.vertex(b'{"instances":[]}') == []


def test_vertex_instances_are_a_batch() -> None:
    """Each instance is a prompt of one batch; a list under parameters.sampling_params goes per instance."""
    body = (
        b'{"instances":[{"text":"a"},{"text":"b"}],'
        b'"parameters":{"sampling_params":[{"temperature":0.1},{"temperature":0.2}]}}'
    )
    reading = engine.vertex(body)
    assert isinstance(reading, list) and [s.value("temperature") for s in reading] == [0.1, 0.2]


# -- transcription --------------------------------------------------------------------------------
def test_transcription_reads_the_last_temperature_field() -> None:
    """The form's temperature is a float; a repeated field is read as its last value."""
    body, content_type = _form([("temperature", b"0.3"), ("temperature", b"0.9")])
    assert _one(engine.transcription(body, content_type))["temperature"] == engine.FieldReading(0.9, True)


def test_transcription_empty_or_missing_temperature_is_the_default() -> None:
    """FastAPI reads an empty form field as missing: Form(0.0)'s default."""
    for fields in ([], [("temperature", b"")]):
        body, content_type = _form(fields)
        assert _one(engine.transcription(body, content_type))["temperature"] == engine.FieldReading(
            0.0, False
        )


def test_transcription_refuses_bad_numbers_and_a_missing_file() -> None:
    """A non-number is a 422, nan fails verify, and the file part is required."""
    body, content_type = _form([("temperature", b"abc")])
    _refused(engine.transcription(body, content_type), "validation")
    body, content_type = _form([("temperature", b"nan")])
    _refused(engine.transcription(body, content_type), "verify")
    body, content_type = _form([("temperature", b"0.3")], file=False)
    _refused(engine.transcription(body, content_type), "validation")


# -- the harness itself ---------------------------------------------------------------------------
def test_guards_leave_the_process_and_raise_on_use() -> None:
    """No guard module stays in sys.modules; a name taken from one raises GuardedUse when used."""
    engine.chat(_chat(b""))
    from tests.fakes.sglang_engine.wheel import Guard, module

    assert not [name for name, mod in sys.modules.items() if isinstance(mod, Guard)]
    ollama_serving = module("sglang.srt.entrypoints.ollama.serving")
    with pytest.raises(engine.GuardedUse):
        ollama_serving.GenerateReqInput(text="hi")


def test_every_route_reads_json_it_can_parse() -> None:
    """Each JSON route of the table answers a plain valid body with one sampling reading."""
    bodies: dict[str, Any] = {
        "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "/invocations": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "/v1/completions": {"model": "m", "prompt": "hi"},
        "/generate": {"text": "hi"},
        "/v1/responses": {"model": "m", "input": "hi"},
        "/v1/messages": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        "/api/chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "/api/generate": {"model": "m", "prompt": "hi"},
        "/vertex_generate": {"instances": [{"text": "hi"}]},
    }
    for (_method, path), read in engine.ROUTES.items():
        sampling = _one(read(json.dumps(bodies[path]).encode()))
        assert not any(sampling.from_body(f) for f in engine.FIELDS), path


def test_generate_null_n_is_refused_by_the_batch_logic() -> None:
    """The gate lets "n": null through, but GenerateReqInput compares get("n", 1) > 1: a TypeError."""
    _refused(engine.generate(b'{"text":"hi","sampling_params":{"n":null}}'), "normalize")
    assert _one(engine.generate(b'{"text":"hi","sampling_params":{"n":null,"n":1}}'))[
        "n"
    ] == engine.FieldReading(1, True)


@pytest.mark.parametrize(
    "body",
    [
        b'{"text":["a","b"],"sampling_params":{"n":-9223372036854775808}}',
        b'{"instances":[{"text":"a"},{"text":"b"}],"parameters":{"sampling_params":{"n":-9223372036854775808}}}',
    ],
    ids=["generate", "vertex"],
)
def test_a_sequence_count_past_the_index_range_is_refused(body: bytes) -> None:
    """Two prompts x n -2**63 overflows ``[params] * num``: the engine answers a 500, samples nothing."""
    read = engine.vertex if b"instances" in body else engine.generate
    _refused(read(body), "normalize")


def test_n_below_one_is_not_refused() -> None:
    """0.5.23's verify has no n check: n 0 is read as sent (GenerateReqInput fans out only n > 1)."""
    assert _one(engine.chat(_chat(b',"n":0')))["n"] == engine.FieldReading(0, True)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(engine.DIALECTS)),
    st.dictionaries(st.sampled_from(_KEYS), _json_values, max_size=6),
)
def test_the_oracle_answers_any_json_object(dialect: str, doc: dict[str, Any]) -> None:
    """Whatever JSON object a route gets, the oracle gives readings or a refusal, never an error of its own."""
    reading = engine.DIALECTS[dialect](json.dumps(doc).encode())
    assert isinstance(reading, engine.Refused) or all(isinstance(s, engine.Sampling) for s in reading)
