"""The probe of a multipart form (SPEC §5.1: ``/v1/audio/transcriptions``).

The engine declares ``temperature: float = Form(0.0)`` (and ``model: str = Form("default")``):
Starlette parses the body with python-multipart, keeps every field as a string (decoded with
the form's charset, latin-1 when that fails) and every part with a ``filename`` as an upload;
FastAPI then takes the LAST value of a repeated field, treats an empty string as missing (the
default applies) and validates the string as a float in pydantic's lax mode.

This module reads the form the same way, with the same parser and the same rules (the parser is
python-multipart, as the engine's; no hand-written multipart scanner): one streaming pass over
the buffered body, keeping only the values of the fields it reads, each cut at a few hundred
bytes (``MAX_NUMERIC_STRING_CHARS`` decides what a usable number is anyway). Injection appends a
field as the form's last part, right before the closing delimiter; since locating that
delimiter is the one thing the parser does not report, the spliced body is parsed again and
refused (400) unless the parser then reads exactly the injected value last (fail closed).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Final

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from controlplane.contracts.fields import FIELD_BY_NAME
from dataplane.errors import BadRequest
from dataplane.router.contract.coercion import str_as_float, str_as_int
from dataplane.router.contract.dialects import TRANSCRIPTION, Dialect
from dataplane.router.contract.probe import ABSENT, MAX_NUMERIC_STRING_CHARS, NUMBER, UNUSABLE, Probe

_MULTIPART: Final = b"multipart/form-data"
# Kept of a field's value: more than any usable number spells (SPEC §4: 64 characters).
_MAX_KEPT_BYTES: Final = MAX_NUMERIC_STRING_CHARS * 4 + 4
_MAX_MODEL_BYTES: Final = 4096
# Part headers are kept until the part's data starts; a part may not make them larger.
_MAX_PART_HEADER_BYTES: Final = 16 * 1024


class FormProbe(Probe):
    """A ``Probe`` of a multipart body, with what injection needs: the boundary."""

    __slots__ = ("boundary", "parts")

    def __init__(self, dialect: Dialect, boundary: bytes) -> None:
        super().__init__(dialect)
        self.boundary = boundary
        self.parts = 0


def form_part(name: str, value: bytes) -> bytes:
    """The bytes of a form field after its delimiter line (``\\r\\n--BOUNDARY``)."""
    return b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n' + value


def _decode(data: bytes, charset: str) -> str:
    """Starlette's ``_user_safe_decode``."""
    try:
        return data.decode(charset)
    except (UnicodeDecodeError, LookupError):
        return data.decode("latin-1")


class _Field:
    __slots__ = ("data", "file", "name", "too_long")

    def __init__(self) -> None:
        self.name: str | None = None
        self.file = False
        self.data = bytearray()
        self.too_long = False


class _Reader:
    """python-multipart callbacks keeping the last value of each field read (Starlette's)."""

    def __init__(self, wanted: dict[str, int], charset: str) -> None:
        self.wanted = wanted  # field name -> byte limit of the value kept
        self.charset = charset
        self.values: dict[str, _Field] = {}
        self.parts = 0
        self.ended = False
        self._part = _Field()
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._header_bytes = 0

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self._part = _Field()
        self._disposition = b""
        self._header_bytes = 0

    def _count_header(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > _MAX_PART_HEADER_BYTES:
            raise BadRequest("a multipart part's headers are too large")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name = b""
        self._header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name")
        if name is None:
            # Starlette refuses the form: 'The Content-Disposition header field "name" must be provided.'
            raise BadRequest('a multipart part has no Content-Disposition "name"')
        part = self._part
        part.name = _decode(name, self.charset)
        part.file = b"filename" in options

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        limit = self.wanted.get(part.name or "")
        if limit is None or part.file:
            return  # not read: nothing kept
        room = limit - len(part.data)
        if end - start > room:
            part.too_long = True
            end = start + max(room, 0)
        part.data += data[start:end]

    def on_part_end(self) -> None:
        self.parts += 1
        part = self._part
        if part.name in self.wanted:
            self.values[part.name] = part  # a repeated field: the last one wins

    def on_end(self) -> None:
        self.ended = True


def _content_type(content_type: bytes | None) -> tuple[bytes, str]:
    if content_type is None:
        raise BadRequest("this route takes a multipart/form-data body")
    kind, params = parse_options_header(content_type)
    if kind != _MULTIPART:
        raise BadRequest("this route takes a multipart/form-data body")
    boundary = params.get(b"boundary")
    if not boundary:
        raise BadRequest("multipart/form-data without a boundary")
    charset = params.get(b"charset", b"utf-8")
    try:
        charset_name = codecs.lookup(charset.decode("latin-1")).name
    except LookupError:
        charset_name = "latin-1"  # as Starlette does
    return boundary, charset_name


def _parse(
    segments: Iterable[bytes | memoryview], boundary: bytes, wanted: dict[str, int], charset: str
) -> _Reader:
    reader = _Reader(wanted, charset)
    try:
        parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
        for segment in segments:
            parser.write(bytes(segment))
        parser.finalize()
    except FormParserError:
        raise BadRequest("malformed multipart/form-data body") from None
    if not reader.ended or reader.parts == 0:
        raise BadRequest("incomplete multipart/form-data body")
    return reader


def _read_field(field: _Field | None, charset: str, integral: bool) -> tuple[int, float]:
    """A form value as FastAPI hands it to pydantic: missing or "" -> the default (absent)."""
    if field is None:
        return ABSENT, 0.0
    if field.file or field.too_long:
        return UNUSABLE, 0.0  # an upload, or more than any number spells
    text = _decode(bytes(field.data), charset)
    if text == "":
        return ABSENT, 0.0
    if len(text) > MAX_NUMERIC_STRING_CHARS:
        return UNUSABLE, 0.0
    if integral:
        i = str_as_int(text)
        return (UNUSABLE, 0.0) if i is None else (NUMBER, float(i))
    f = str_as_float(text)
    return (UNUSABLE, 0.0) if f is None else (NUMBER, f)


def probe_form(body: bytes, content_type: bytes | None, dialect: Dialect = TRANSCRIPTION) -> FormProbe:
    """Probe a multipart body: the carried fields and ``model`` (SPEC §4 rules on form values)."""
    boundary, charset = _content_type(content_type)
    names = [f for f in FIELD_BY_NAME.values() if f.name in dialect.carried]
    wanted = {f.name: _MAX_KEPT_BYTES for f in names}
    wanted["model"] = _MAX_MODEL_BYTES
    reader = _parse((body,), boundary, wanted, charset)
    probe = FormProbe(dialect, boundary)
    probe.parts = reader.parts
    for f in names:
        state, value = _read_field(reader.values.get(f.name), charset, f.integral)
        probe.states[f.index] = state
        probe.values[f.index] = value
    model = reader.values.get("model")
    if model is not None and not model.file and model.data:
        if model.too_long:
            raise BadRequest("model is too long")
        probe.model = _decode(bytes(model.data), charset)
    # The closing delimiter: the parser ends the last part at the first "\r\n--BOUNDARY--".
    start = body.find(b"--" + boundary)
    probe.insert_at = body.find(b"\r\n--" + boundary + b"--", max(start, 0))
    return probe


def check_injected(
    probe: FormProbe, spliced: Iterable[bytes | memoryview], injected: dict[str, bytes]
) -> None:
    """Parse the spliced body again: the parser must read the original parts, then each
    injected field last with exactly the injected value; else the body is refused."""
    _, charset = _content_type(b"multipart/form-data; boundary=" + probe.boundary)
    wanted = {name: _MAX_KEPT_BYTES for name in injected}
    try:
        reader = _parse(spliced, probe.boundary, wanted, charset)
    except BadRequest:
        reader = None
    if reader is None or reader.parts != probe.parts + len(injected):
        raise BadRequest("cannot add fields to this multipart/form-data body exactly")
    for name, value in injected.items():
        field = reader.values.get(name)
        if field is None or field.file or bytes(field.data) != value:
            raise BadRequest("cannot add fields to this multipart/form-data body exactly")
