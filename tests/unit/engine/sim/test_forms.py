"""engine-sim reads multipart forms as FastAPI hands them to Form/File parameters."""

from __future__ import annotations

import pytest

from dataplane.engine.sim.forms import FormError, parse_form

BOUNDARY = b"b0undary"
CONTENT_TYPE = b"multipart/form-data; boundary=" + BOUNDARY


def _part(head: bytes, value: bytes) -> bytes:
    return b"--" + BOUNDARY + b"\r\nContent-Disposition: form-data; " + head + b"\r\n\r\n" + value + b"\r\n"


def _body(*parts: bytes) -> bytes:
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


def test_last_value_wins_and_empty_fields_are_absent() -> None:
    """A repeated field reads as its last value; an empty one is left to the Form default."""
    form = parse_form(
        CONTENT_TYPE,
        _body(
            _part(b'name="temperature"', b"0.1"),
            _part(b'name="temperature"', b"0.9"),
            _part(b'name="language"', b""),
        ),
    )
    assert form.fields == {"temperature": "0.9", "language": ""}
    assert form.values() == {"temperature": "0.9"}


def test_file_parts_are_kept_apart_from_fields() -> None:
    """A part with a filename is a file (its bytes kept), not a text field."""
    form = parse_form(
        CONTENT_TYPE,
        _body(_part(b'name="file"; filename="a.wav"', b"RIFF\r\n\x00"), _part(b'name="model"', b"w")),
    )
    assert form.files == {"file": b"RIFF\r\n\x00"} and form.fields == {"model": "w"}


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (None, b""),
        (b"application/json", b"{}"),
        (b"multipart/form-data", b""),
        (
            CONTENT_TYPE,
            b"--" + BOUNDARY + b"\r\nContent-Type: text/plain\r\n\r\nx\r\n--" + BOUNDARY + b"--\r\n",
        ),
        (CONTENT_TYPE, b"garbage without any boundary line"),
    ],
)
def test_unreadable_forms_are_refused(content_type: bytes | None, body: bytes) -> None:
    """Not multipart, no boundary parameter, a part without Content-Disposition, no boundary line."""
    with pytest.raises(FormError):
        parse_form(content_type, body)
