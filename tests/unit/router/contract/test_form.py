"""The multipart form of /v1/audio/transcriptions (SPEC §5.1): read as Starlette + FastAPI read it."""

from __future__ import annotations

import pytest

from controlplane.contracts import parse_contract_json
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.body import SplicedBody
from dataplane.router.contract.enforce import compile_contract, enforce
from dataplane.router.contract.form import probe_form
from dataplane.router.contract.probe import ABSENT, NUMBER, UNUSABLE

BOUNDARY = b"b0und4ry"
CONTENT_TYPE = b"multipart/form-data; boundary=" + BOUNDARY
ROUTE = "/v1/audio/transcriptions"


def form(*fields: tuple[str, bytes], audio: bytes = b"RIFF....WAVE", filename: bool = False) -> bytes:
    """A multipart body: the audio file first, then ``fields`` (a field with ``filename`` if asked)."""
    parts = [
        b'Content-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'
        + audio
    ]
    for name, value in fields:
        extra = b'; filename="t.txt"' if filename else b""
        parts.append(
            b'Content-Disposition: form-data; name="' + name.encode() + b'"' + extra + b"\r\n\r\n" + value
        )
    return b"".join(b"--" + BOUNDARY + b"\r\n" + p + b"\r\n" for p in parts) + b"--" + BOUNDARY + b"--\r\n"


def _forward(body: bytes, contract: str = '{"temperature": 1}') -> bytes:
    compiled = compile_contract(parse_contract_json(contract, "reject"), scope="*", revision=1)
    return bytes(enforce(compiled, probe_form(body, CONTENT_TYPE), body, ROUTE))


@pytest.mark.parametrize(
    ("value", "state", "number"),
    [
        (b"0.2", NUMBER, 0.2),
        (b" 1.5 ", NUMBER, 1.5),
        (b"1_0", NUMBER, 10.0),
        (b"inf", NUMBER, float("inf")),
        (b"", ABSENT, 0.0),  # FastAPI: an empty form value is missing, the default applies
        (b"abc", UNUSABLE, 0.0),
        (b"1" * 65, UNUSABLE, 0.0),
        (b"9" * 2000, UNUSABLE, 0.0),
    ],
)
def test_temperature_is_read_as_fastapi_reads_a_float_form_field(
    value: bytes, state: int, number: float
) -> None:
    """The form value is a string validated as pydantic's lax float (SPEC §4 string rules)."""
    p = probe_form(form(("temperature", value)), CONTENT_TYPE)
    assert p.states[0] == state
    if state == NUMBER:
        assert p.values[0] == number


def test_the_last_of_a_repeated_field_wins_and_model_is_read() -> None:
    """Starlette's form keeps every value; FastAPI takes the last; model routes the request."""
    p = probe_form(form(("temperature", b"0.2"), ("model", b"whisper"), ("temperature", b"1")), CONTENT_TYPE)
    assert (p.states[0], p.values[0], p.model) == (NUMBER, 1.0, "whisper")


def test_a_file_part_named_temperature_is_unusable() -> None:
    """A temperature sent as an upload is not a float to the engine: unusable (refused under reject)."""
    p = probe_form(form(("temperature", b"1"), filename=True), CONTENT_TYPE)
    assert p.states[0] == UNUSABLE


def test_injection_appends_a_field_before_the_closing_delimiter() -> None:
    """An absent temperature is injected as the form's last field; the parser reads it last."""
    body = form(("model", b"m"))
    forwarded = _forward(body)
    assert forwarded == body.replace(
        b"\r\n--" + BOUNDARY + b"--",
        b"\r\n--"
        + BOUNDARY
        + b'\r\nContent-Disposition: form-data; name="temperature"\r\n\r\n1.0\r\n--'
        + BOUNDARY
        + b"--",
    )
    p = probe_form(forwarded, CONTENT_TYPE)
    assert (p.states[0], p.values[0], p.model) == (NUMBER, 1.0, "m")


def test_an_empty_temperature_is_overridden_by_the_injected_one() -> None:
    """temperature="" is the default to the engine: the router injects, and the injected value is read."""
    forwarded = _forward(form(("temperature", b"")))
    assert probe_form(forwarded, CONTENT_TYPE).values[0] == 1.0


def test_a_different_temperature_is_a_violation_and_other_fields_cannot_be_carried() -> None:
    """A conflicting value is refused; a contracted top_p cannot be set on this route at all."""
    with pytest.raises(SamplingContractViolation, match=r"got 0\.2, expected 1"):
        _forward(form(("temperature", b"0.2")))
    with pytest.raises(SamplingContractViolation) as caught:
        _forward(form(), '{"top_p": 0.9}')
    assert caught.value.message.endswith(
        f"top_p violates this deployment's sampling contract: cannot be set on {ROUTE}"
    )


def test_large_audio_is_not_kept_and_is_spliced_as_segments() -> None:
    """The audio part is never copied into the probe; a large body is forwarded as views around the field."""
    body = form(("model", b"m"), audio=b"\0" * 200_000)
    compiled = compile_contract(parse_contract_json('{"temperature": 1}', "reject"), scope="*", revision=1)
    forwarded = enforce(compiled, probe_form(body, CONTENT_TYPE), body, ROUTE)
    assert isinstance(forwarded, SplicedBody)
    assert probe_form(bytes(forwarded), CONTENT_TYPE).values[0] == 1.0


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        (None, b"x", "multipart/form-data body"),
        (b"application/json", b"{}", "multipart/form-data body"),
        (b"application/x-www-form-urlencoded", b"temperature=1", "multipart/form-data body"),
        (b"multipart/form-data", b"x", "without a boundary"),
        (CONTENT_TYPE, b"--other\r\n\r\nx\r\n--other--", "multipart/form-data body"),
        (CONTENT_TYPE, form()[:-20], "incomplete"),
        (
            CONTENT_TYPE,
            b"--" + BOUNDARY + b"\r\nX: y\r\n\r\nv\r\n--" + BOUNDARY + b"--\r\n",
            'no Content-Disposition "name"',
        ),
    ],
)
def test_bodies_the_router_cannot_read_exactly_are_bad_requests(
    content_type: bytes | None, body: bytes, message: str
) -> None:
    """Not multipart, no boundary, malformed, truncated or nameless: a 400, never a guess."""
    with pytest.raises(BadRequest, match=message):
        probe_form(body, content_type)
