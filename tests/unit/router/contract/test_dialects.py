"""Each dialect judged and injected at its own field paths (SPEC §5.1), with pinned bodies.

What the engine then reads from these bodies is checked against SGLang's own code in
``test_dialects_against_the_engine.py``; here the exact bytes the router forwards are pinned.
"""

from __future__ import annotations

import json

import pytest

from controlplane.contracts import parse_contract_json
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.body import SplicedBody
from dataplane.router.contract.dialects import (
    CHAT,
    GENERATE,
    MESSAGES,
    OLLAMA,
    RESPONSES,
    VERTEX,
    Dialect,
)
from dataplane.router.contract.enforce import compile_contract, enforce
from dataplane.router.contract.probe import ABSENT, NUMBER, UNUSABLE, probe_body
from dataplane.router.headers import end_to_end

CONTRACT = '{"temperature": 1, "top_p": 0.95, "top_k": {"min": 1, "max": 50, "default": 40}}'


def _forward(body: bytes, dialect: Dialect, contract: str = CONTRACT, conflict: str = "reject") -> bytes:
    compiled = compile_contract(parse_contract_json(contract, conflict), scope="*", revision=1)
    return bytes(enforce(compiled, probe_body(body, dialect), body, "/route"))


def _violation(body: bytes, dialect: Dialect, contract: str = CONTRACT) -> SamplingContractViolation:
    with pytest.raises(SamplingContractViolation) as caught:
        _forward(body, dialect, contract)
    return caught.value


def test_responses_injects_at_the_top_level() -> None:
    """/v1/responses: the fields sit at the top level, as in chat."""
    assert _forward(b'{"model":"m","input":"hi"}', RESPONSES) == (
        b'{"model":"m","input":"hi","temperature":1.0,"top_p":0.95,"top_k":40}'
    )


def test_responses_cannot_carry_n() -> None:
    """A contracted n cannot be sent on /v1/responses: a violation naming the route to use."""
    err = _violation(b'{"model":"m","input":"hi"}', RESPONSES, '{"temperature": 1, "n": 1}')
    assert err.param == "n" and err.violated == ("n",)
    assert err.message == (
        "n violates this deployment's sampling contract: cannot be set on /route; use /v1/chat/completions"
    )


def test_a_cannot_carry_violation_is_reported_in_field_order() -> None:
    """Value violations and fields the route cannot carry are all counted; the first in §2 order is told."""
    contract = '{"temperature": 1, "min_p": 0.1, "n": 2}'
    err = _violation(b'{"model":"m","temperature":0.5}', MESSAGES, contract)
    assert err.param == "temperature" and err.violated == ("temperature", "min_p", "n")
    err = _violation(b'{"model":"m"}', MESSAGES, contract)
    assert err.param == "min_p" and "cannot be set on /route" in err.message


def test_a_band_without_default_on_an_uncarried_field_passes() -> None:
    """Nothing needs sending for a band without default, so the route can serve it."""
    body = b'{"model":"m","messages":[]}'
    assert _forward(body, MESSAGES, '{"min_p": {"min": 0, "max": 0.5}}') == body
    err = _violation(body, MESSAGES, '{"min_p": {"min": 0, "max": 0.5, "default": 0.1}}')
    assert err.param == "min_p"


def test_messages_reads_only_its_three_fields() -> None:
    """/v1/messages carries temperature, top_p and top_k; other keys are not its fields."""
    p = probe_body(b'{"model":"m","temperature":"0.5","top_k":3,"min_p":[1],"n":"x"}', MESSAGES)
    assert p.states == [NUMBER, ABSENT, NUMBER, ABSENT, ABSENT, ABSENT, ABSENT, ABSENT]
    assert p.values[0] == 0.5 and p.model == "m"


def test_ollama_creates_options_when_absent_or_null() -> None:
    """Ollama keeps the fields under options: created when absent or null."""
    assert _forward(b'{"model":"m","messages":[]}', OLLAMA) == (
        b'{"model":"m","messages":[],"options":{"temperature":1.0,"top_p":0.95,"top_k":40}}'
    )
    assert _forward(b'{"model":"m","options":null}', OLLAMA) == (
        b'{"model":"m","options":null,"options":{"temperature":1.0,"top_p":0.95,"top_k":40}}'
    )


def test_ollama_restates_the_clients_options_last() -> None:
    """The client's options are written again last, with the injected pairs last inside them."""
    body = b'{"model":"m","options":{"num_predict":8,"temperature":1}}'
    forwarded = _forward(body, OLLAMA)
    assert forwarded == body[:-1] + b',"options":{"num_predict":8,"temperature":1,"top_p":0.95,"top_k":40}}'
    assert json.loads(forwarded)["options"] == {
        "num_predict": 8,
        "temperature": 1,
        "top_p": 0.95,
        "top_k": 40,
    }


@pytest.mark.parametrize(
    ("value", "state"),
    [(b"0.95", NUMBER), (b'"0.95"', UNUSABLE), (b"true", UNUSABLE), (b"null", ABSENT), (b"[1]", UNUSABLE)],
)
def test_ollama_options_take_json_numbers_only(value: bytes, state: int) -> None:
    """options go to SamplingParams as they are: a string is never sampled as a number, so it is unusable."""
    p = probe_body(b'{"model":"m","options":{"top_p":' + value + b"}}", OLLAMA)
    assert p.states[1] == state


def test_ollama_non_object_options_is_a_bad_request() -> None:
    """A present options that is not an object is a 400 naming it."""
    with pytest.raises(BadRequest, match="options must be an object"):
        probe_body(b'{"model":"m","options":[1]}', OLLAMA)


def test_vertex_creates_parameters_and_sampling_params() -> None:
    """Vertex: the fields sit under parameters.sampling_params; both are created when absent."""
    assert _forward(b'{"instances":[{"text":"a"}]}', VERTEX) == (
        b'{"instances":[{"text":"a"}],"parameters":{"sampling_params":'
        b'{"temperature":1.0,"top_p":0.95,"top_k":40}}}'
    )


def test_vertex_restates_parameters_with_sampling_params_last() -> None:
    """The client's parameters are written again last, with a sampling_params of ours last inside."""
    body = b'{"instances":[{"text":"a"}],"parameters":{"max_new_tokens":4,"sampling_params":{"top_k":3}}}'
    doc = json.loads(_forward(body, VERTEX))
    assert doc["parameters"] == {
        "max_new_tokens": 4,
        "sampling_params": {"top_k": 3, "temperature": 1.0, "top_p": 0.95},
    }


def test_vertex_reads_the_winning_parameters() -> None:
    """Of repeated parameters the last wins, and its sampling_params is the one judged."""
    body = b'{"parameters":{"sampling_params":{"temperature":1}},"parameters":{"sampling_params":{"temperature":2}}}'
    assert _violation(body, VERTEX).param == "temperature"


def test_generate_batch_judges_and_injects_every_element() -> None:
    """A /generate batch: each element of the sampling_params list judged and injected as its own object."""
    body = b'{"text":["a","b","c"],"sampling_params":[{"top_k":3},null,{"temperature":1}]}'
    doc = json.loads(_forward(body, GENERATE))
    assert doc["sampling_params"] == [
        {"top_k": 3, "temperature": 1.0, "top_p": 0.95},
        {"temperature": 1.0, "top_p": 0.95, "top_k": 40},
        {"temperature": 1, "top_p": 0.95, "top_k": 40},
    ]


def test_generate_batch_violation_in_any_element_refuses_the_request() -> None:
    """A field violated in one element of the batch refuses the request, counted once."""
    body = b'{"text":["a","b"],"sampling_params":[{"top_k":3},{"top_k":99,"temperature":2}]}'
    err = _violation(body, GENERATE)
    assert err.violated == ("temperature", "top_k") and "got 2" in err.message


def test_generate_batch_already_complete_is_forwarded_untouched() -> None:
    """A batch whose every element already holds the contracted values is forwarded as it is."""
    body = b'{"text":["a"],"sampling_params":[{"temperature":1,"top_p":0.95,"top_k":5}]}'
    assert _forward(body, GENERATE) == body


def test_vertex_batch_under_parameters() -> None:
    """Vertex takes a batch list under parameters.sampling_params too."""
    body = b'{"instances":[{"text":"a"},{"text":"b"}],"parameters":{"sampling_params":[{},{"top_p":0.95}]}}'
    doc = json.loads(_forward(body, VERTEX))
    assert doc["parameters"]["sampling_params"] == [
        {"temperature": 1.0, "top_p": 0.95, "top_k": 40},
        {"top_p": 0.95, "temperature": 1.0, "top_k": 40},
    ]


def test_allow_injects_on_every_dialect_but_never_rewrites() -> None:
    """Under allow, absent fields are injected where the dialect reads them and present ones pass."""
    contract = '{"temperature": 1}'
    body = b'{"model":"m","options":{"temperature":"hot"}}'
    assert _forward(body, OLLAMA, contract, "allow") == body
    assert json.loads(_forward(b'{"model":"m"}', OLLAMA, contract, "allow"))["options"] == {
        "temperature": 1.0
    }


def test_large_nested_bodies_are_spliced_as_segments() -> None:
    """A large nested body is forwarded as views of the client's bytes around the injected ones."""
    body = b'{"model":"m","messages":[{"content":"' + b"x" * 70_000 + b'"}],"options":{"seed":1}}'
    compiled = compile_contract(parse_contract_json(CONTRACT, "reject"), scope="*", revision=1)
    forwarded = enforce(compiled, probe_body(body, OLLAMA), body, "/api/chat")
    assert isinstance(forwarded, SplicedBody)
    assert json.loads(bytes(forwarded))["options"] == {
        "seed": 1,
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": 40,
    }


@pytest.mark.parametrize("name", [b"content-encoding", b"x-body-compressed"])
def test_a_coded_body_is_refused_on_judged_routes_only(name: bytes) -> None:
    """Content-Encoding / x-body-compressed: refused when judged (naming the header), kept when not."""
    headers = [(b"content-type", b"application/json"), (name, b"zstd")]
    with pytest.raises(BadRequest, match=name.decode()):
        end_to_end(headers, judged=True)
    assert (name, b"zstd") in end_to_end(headers)


def test_chat_stays_the_default_dialect() -> None:
    """probe_body without a dialect reads chat."""
    assert probe_body(b'{"temperature":0.5}').dialect is CHAT


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        (GENERATE, b'{"text":"hi","sampling_params":[{"stop":"x","temperature":0.5}]}'),
        (GENERATE, b'{"input_ids":[1,2],"sampling_params":[{"stop":"x","temperature":0.5}]}'),
        (GENERATE, b'{"text":null,"input_ids":[1],"sampling_params":[{}]}'),
        (
            VERTEX,
            b'{"instances":[{}],"parameters":{"text":"hi","sampling_params":[{"stop":"x","temperature":0.5}]}}',
        ),
    ],
)
def test_a_list_of_sampling_objects_for_one_prompt_is_refused(dialect: Dialect, body: bytes) -> None:
    """For one prompt the engine reads sampling_params with dict(): a list of one two-key object
    becomes {"stop": "temperature"} and every field its default, so the router refuses the list."""
    with pytest.raises(BadRequest, match="not a batch of prompts"):
        _forward(body, dialect, '{"temperature": 0.5}')


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        (GENERATE, b'{"text":["hi"],"sampling_params":[{"temperature":0.5}]}'),
        (GENERATE, b'{"text":null,"input_ids":[ [1],[2]],"sampling_params":[{},{}]}'),
        (VERTEX, b'{"instances":[{"text":"hi"}],"parameters":{"sampling_params":[{"temperature":0.5}]}}'),
    ],
)
def test_a_list_of_sampling_objects_for_a_batch_is_judged(dialect: Dialect, body: bytes) -> None:
    """A batch of prompts (a text list, token-id lists, Vertex instances) takes the list."""
    assert json.loads(_forward(body, dialect, '{"temperature": 0.5}'))
