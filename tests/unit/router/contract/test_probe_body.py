"""The request probe (SPEC §4): structure, keys, routing fields, /generate, and refusals."""

from __future__ import annotations

import pytest

from dataplane.errors import BadRequest
from dataplane.router.contract.dialects import GENERATE
from dataplane.router.contract.probe import ABSENT, NUMBER, UNUSABLE, probe_body

TEMPERATURE, TOP_P, TOP_K, N = 0, 1, 2, 7


def test_reads_routing_keys_and_sampling_values() -> None:
    """model, stream, max_tokens and max_completion_tokens are read; sampling fields get states."""
    p = probe_body(
        b'{"model":"llama","stream":true,"max_tokens":16,"max_completion_tokens":"0_32",'
        b'"messages":[{"role":"user","content":"hi"}],"temperature":0.5,"n":true,"top_p":null}'
    )
    assert (p.model, p.stream, p.max_tokens, p.max_completion_tokens) == ("llama", True, 16, 32)
    assert p.states == [NUMBER, ABSENT, ABSENT, ABSENT, ABSENT, ABSENT, ABSENT, NUMBER]
    assert p.values[TEMPERATURE] == 0.5 and p.values[N] == 1.0


def test_keys_compare_after_unescaping() -> None:
    """An escaped key is the key it spells: "\\u0074emperature" is temperature."""
    p = probe_body(b'{"\\u0074emperature": 0.25, "\\u006dodel": "m"}')
    assert p.states[TEMPERATURE] == NUMBER and p.values[TEMPERATURE] == 0.25
    assert p.model == "m"


def test_repeated_sampling_key_last_wins() -> None:
    """A repeated sampling key takes its last value, as the engine does, whatever the spelling."""
    p = probe_body(b'{"temperature": 2, "te\\u006dperature": 0.5}')
    assert p.values[TEMPERATURE] == 0.5
    p = probe_body(b'{"temperature": 0.5, "temperature": null}')
    assert p.states[TEMPERATURE] == ABSENT
    p = probe_body(b'{"temperature": 0.5, "temperature": [1]}')
    assert p.states[TEMPERATURE] == UNUSABLE


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"a","model":"b"}',
        b'{"stream":null,"stream":true}',
        b'{"max_tokens":1,"m\\u0061x_tokens":1}',
        b'{"max_completion_tokens":1,"max_completion_tokens":1}',
    ],
)
def test_repeated_routing_key_is_a_bad_request(body: bytes) -> None:
    """A repeated routing key is a 400, even when one of them is null or escaped."""
    with pytest.raises(BadRequest, match="repeated routing key"):
        probe_body(body)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'"x"',
        b"1",
        b"null",
        b"{",
        b'{"a":1} x',
        b'{"a":1}{}',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b"\xef\xbb\xbf{}",
        b'{"a":"\\ud800"}',
        b"{'a':1}",
        b'{"a":01}',
        b"[" * 5000 + b"]" * 5000,
        b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_not_one_json_object_is_a_bad_request(body: bytes) -> None:
    """Malformed JSON, non-objects, NaN literals, lone surrogates, too deep nesting: 400."""
    with pytest.raises(BadRequest) as exc:
        probe_body(body)
    assert exc.value.message.startswith("body must be a JSON object") and exc.value.status == 400


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"model": "m", "temperature": 0.5,}', "trailing comma in object at byte 34"),
        (b'{"model": "m"', "it ends before the JSON does"),
        (b'[{"model": "m"}]', "expected `object`, got `array`"),
        (b"  ", "the body is empty"),
        (b"{'model': 'm'}", "at byte 1"),
    ],
)
def test_a_malformed_body_is_told_what_is_wrong_and_where(body: bytes, said: str) -> None:
    """The 400 for a body that is not one JSON object names the mistake and its byte offset."""
    with pytest.raises(BadRequest) as exc:
        probe_body(body)
    assert exc.value.message.startswith("body must be a JSON object: ") and said in exc.value.message


def test_routing_value_types() -> None:
    """model must be a string; stream is read as pydantic reads a bool."""
    with pytest.raises(BadRequest, match="model must be a string"):
        probe_body(b'{"model": 5}')
    with pytest.raises(BadRequest, match="stream must be a boolean"):
        probe_body(b'{"stream": "maybe"}')
    assert probe_body(b'{"stream": "yes", "model": null}').stream is True
    assert probe_body(b'{"stream": 0}').stream is False


def test_values_of_other_shapes() -> None:
    """Arrays and objects are unusable, bools are 1/0, out-of-range literals are unusable."""
    p = probe_body(b'{"temperature":[0.5],"top_p":{"v":1},"top_k":false,"n":1e400}')
    assert p.states == [UNUSABLE, UNUSABLE, NUMBER, ABSENT, ABSENT, ABSENT, ABSENT, UNUSABLE]
    assert p.values[TOP_K] == 0.0


def test_nested_keys_are_not_read() -> None:
    """Only top-level keys count: a temperature inside messages is not the request's."""
    p = probe_body(b'{"messages":[{"temperature":5,"model":"x"}],"x":{"model":"y","model":"z"}}')
    assert p.states[TEMPERATURE] == ABSENT and p.model is None


def test_insertion_point() -> None:
    """insert_at is the final '}', also before trailing whitespace; an empty object needs no comma."""
    body = b' {"a": 1}  \n'
    p = probe_body(body)
    assert body[p.insert_at : p.insert_at + 1] == b"}" and p.insert_at == 8 and p.needs_comma
    p = probe_body(b"\t{ \n }\r\n")
    assert p.insert_at == 5 and not p.needs_comma


def test_generate_reads_under_sampling_params() -> None:
    """/generate: fields under sampling_params; top-level model still read; top-level fields ignored."""
    p = probe_body(b'{"model":"m","temperature":2,"sampling_params":{"temperature":0.5,"n":2}}', GENERATE)
    assert p.model == "m" and p.values[TEMPERATURE] == 0.5 and p.values[N] == 2.0
    assert p.raw is not None and bytes(p.raw) == b'{"temperature":0.5,"n":2}'


def test_generate_reads_with_the_schema_gate() -> None:
    """/generate: a float field takes JSON numbers only, an int field JSON integers only (SPEC §4)."""
    p = probe_body(
        b'{"sampling_params":{"temperature":"0.5","top_p":true,"top_k":40.0,"n":1e0,"min_p":0}}', GENERATE
    )
    assert p.states[:4] == [UNUSABLE, UNUSABLE, UNUSABLE, NUMBER] and p.states[N] == UNUSABLE
    p = probe_body(b'{"sampling_params":{"temperature":1,"top_k":40,"n":-0}}', GENERATE)
    assert (p.values[TEMPERATURE], p.values[TOP_K], p.values[N]) == (1.0, 40.0, 0.0)


def test_generate_last_sampling_params_wins() -> None:
    """A repeated sampling_params: the last one is the engine's and the probe's."""
    p = probe_body(b'{"sampling_params":{"temperature":0.5},"sampling_params":{"top_p":0.5}}', GENERATE)
    assert p.states[TEMPERATURE] == ABSENT and p.states[TOP_P] == NUMBER
    p = probe_body(b'{"sampling_params":{"temperature":0.5},"sampling_params":null}', GENERATE)
    assert p.raw is None and p.chain == [None] and p.states[TEMPERATURE] == ABSENT


@pytest.mark.parametrize("value", [b"5", b'"x"', b"true", b"[1]", b"[[]]"])
def test_generate_non_object_sampling_params_is_a_bad_request(value: bytes) -> None:
    """A present, non-null sampling_params that is neither an object nor a list of objects is a 400."""
    with pytest.raises(BadRequest, match="sampling_params must be an object or a list of objects"):
        probe_body(b'{"text":["a"],"sampling_params":' + value + b"}", GENERATE)


def test_generate_empty_batch_is_a_bad_request() -> None:
    """An empty sampling_params list is a 400: there is nothing to inject into (SPEC §4)."""
    with pytest.raises(BadRequest, match="sampling_params must not be an empty list"):
        probe_body(b'{"text":["a"],"sampling_params":[]}', GENERATE)


def test_a_refused_body_leaves_no_state_behind() -> None:
    """After a body refused mid-decode, the next body is probed afresh."""
    with pytest.raises(BadRequest):
        probe_body(b'{"model":"a","model":"b"}')
    with pytest.raises(BadRequest):
        probe_body(b'{"model":"a","stream":true,')
    assert probe_body(b'{"model":"a","stream":true}').model == "a"


def test_probes_in_threads_do_not_interfere() -> None:
    """Routing keys seen by one thread's decode never count in another's."""
    from concurrent.futures import ThreadPoolExecutor

    bodies = [
        f'{{"model":"m{i}","stream":true,"max_tokens":{i},"temperature":0.5}}'.encode() for i in range(400)
    ]
    with ThreadPoolExecutor(4) as pool:
        probes = list(pool.map(probe_body, bodies))
    assert [p.max_tokens for p in probes] == list(range(400))
    assert all(p.model == f"m{i}" for i, p in enumerate(probes))
