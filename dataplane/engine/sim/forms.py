"""Multipart form bodies as FastAPI hands them to ``Form``/``File`` parameters. Pure.

Parsed with ``python-multipart`` (the parser Starlette uses). Starlette's form is a multidict
whose lookup returns the *last* value of a repeated field, and FastAPI treats an empty string
as an absent form field (its default applies): both are kept here, so engine-sim reads
``POST /v1/audio/transcriptions`` as SGLang 0.5.23 does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header

# Part headers are few and short in any real client; python-multipart's own defaults.
_MAX_PART_HEADERS = 8


class FormError(ValueError):
    """Not a multipart/form-data body this parser can read."""


@dataclass(slots=True)
class Form:
    """Text fields (last value of each name) and the names of the file parts."""

    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)

    def values(self) -> dict[str, str]:
        """The text fields FastAPI passes to ``Form`` parameters: empty strings dropped."""
        return {k: v for k, v in self.fields.items() if v != ""}


def parse_form(content_type: bytes | None, body: bytes) -> Form:
    """Read a whole multipart/form-data body (already bounded by the server's body limit)."""
    if content_type is None:
        raise FormError("missing content-type")
    media, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise FormError(f"expected multipart/form-data with a boundary, got {content_type!r}")
    form = Form()
    part: dict[str, bytes | bytearray] = {}
    header_field = bytearray()
    header_value = bytearray()

    def on_part_begin() -> None:
        part.clear()
        part["data"] = bytearray()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        buffer = part["data"]
        assert isinstance(buffer, bytearray)
        buffer += data[start:end]

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header_field.extend(data[start:end])

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header_value.extend(data[start:end])

    def on_header_end() -> None:
        part[bytes(header_field).lower().decode("latin-1")] = bytes(header_value)
        header_field.clear()
        header_value.clear()

    def on_part_end() -> None:
        disposition = part.get("content-disposition")
        if not isinstance(disposition, bytes):
            raise FormError("a part without Content-Disposition")
        _kind, params = parse_options_header(disposition)
        name = params.get(b"name")
        if name is None:
            raise FormError("a part without a name")
        key = name.decode("utf-8", "replace")
        data = bytes(part["data"])
        if b"filename" in params:
            form.files[key] = data
        else:
            form.fields[key] = data.decode("utf-8", "replace")

    callbacks = {
        "on_part_begin": on_part_begin,
        "on_part_data": on_part_data,
        "on_part_end": on_part_end,
        "on_header_field": on_header_field,
        "on_header_value": on_header_value,
        "on_header_end": on_header_end,
    }
    parser = MultipartParser(boundary, callbacks, max_header_count=_MAX_PART_HEADERS)  # type: ignore[arg-type]
    try:
        parser.write(body)
        parser.finalize()
    except FormError:
        raise
    except Exception as exc:  # python-multipart's MultipartParseError and friends
        raise FormError(str(exc)) from exc
    return form
