"""The request probe (SPEC §4): one msgspec pass over the body, nothing client-sized kept.

How the pass is exact, key by key, against what the engine does (``json.loads`` of the raw
bytes, last key wins, then pydantic lax validation):

* msgspec decodes the top-level object into a Struct whose fields are the keys we read; every
  other value is skipped in C without being built. msgspec compares keys AFTER JSON unescaping
  (``"\\u0074emperature"`` is temperature) and a repeated key overwrites the earlier one: the
  same last-key-wins as ``json.loads``.
* Sampling keys are decoded to ``msgspec.Raw`` (a zero-copy view of the value's bytes) and read
  here: number literals with Python's ``int()``/``float()``, exactly what ``json.loads`` calls;
  strings with the pydantic rules of ``coercion``.
* Routing keys must be refused when repeated, which a Struct cannot tell. So each routing key has
  its own marker type and msgspec hands every occurrence to ``_on_routing_value`` (its
  ``dec_hook``), which refuses a second one. Routing values are small scalars.
* Anything msgspec refuses (malformed JSON, ``NaN`` literals, lone surrogate escapes, too deep
  nesting) is a 400: refusing is always safe, and ``json.loads`` would refuse most of it too. What
  msgspec accepts but ``json.loads`` refuses (e.g. invalid UTF-8 inside a skipped string) reaches
  the engine, which refuses it: also safe.
* ``/generate`` keeps its fields under ``sampling_params``: the top-level Struct takes it as Raw
  and a second Struct decoder reads the eight fields from that Raw (same rules).

No hand-written JSON scanner: msgspec gives exact skipping at C speed; the only byte-level work
here is locating the body's final ``}`` and telling an empty object, both O(1) on real bodies.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any, Final

import msgspec

from controlplane.contracts.fields import FIELDS
from dataplane.errors import BadRequest
from dataplane.router.contract.coercion import str_as_bool, str_as_float, str_as_int

ABSENT: Final = 0
NUMBER: Final = 1
UNUSABLE: Final = 2

# SPEC §4: strings longer than this are unusable. A JSON string of at most 64 characters
# takes at most 64 * 12 + 2 bytes (astral characters written as two \uXXXX escapes), so longer
# Raw values are unusable without decoding them (nothing client-sized is built).
MAX_NUMERIC_STRING_CHARS: Final = 64
_MAX_VALUE_BYTES: Final = MAX_NUMERIC_STRING_CHARS * 12 + 2

# The engine stores integral values in 64-bit ints: pydantic's float_as_int accepts whole
# floats strictly inside (i64::MIN, i64::MAX as f64) = (-2^63, 2^63).
_I64_BOUND: Final = 2.0**63

_BODY_NOT_OBJECT: Final = "body must be a JSON object"
_ABSENT_RAW: Final = msgspec.Raw(b"")
_EMPTY_OBJECT = re.compile(rb"[ \t\r\n]*\{[ \t\r\n]*\}[ \t\r\n]*")
_JSON_WS: Final = b" \t\r\n"
_CLOSE_BRACE: Final = 0x7D


class _Model:
    __slots__ = ()


class _Stream:
    __slots__ = ()


class _MaxTokens:
    __slots__ = ()


class _MaxCompletionTokens:
    __slots__ = ()


_ROUTING_NAMES: Final[dict[type, str]] = {
    _Model: "model",
    _Stream: "stream",
    _MaxTokens: "max_tokens",
    _MaxCompletionTokens: "max_completion_tokens",
}


class _Seen(threading.local):
    """Routing values of the decode in progress, by marker type (per thread: the hook that
    fills it gets no context from msgspec)."""

    def __init__(self) -> None:
        self.values: dict[type, object] = {}


_seen = _Seen()
_MARKERS: Final[dict[type, object]] = {t: t() for t in _ROUTING_NAMES}


def _on_routing_value(kind: type, value: object) -> object:
    # Called by msgspec once per occurrence of a routing key, null included, in body order.
    values = _seen.values
    if kind in values:
        # SPEC §4: a repeated routing key is a 400 (even {"stream":null,"stream":true}).
        raise BadRequest(f'repeated routing key "{_ROUTING_NAMES[kind]}"')
    values[kind] = value
    return _MARKERS[kind]


def _sampling_struct(name: str, *, routing: bool, sampling: bool, nested: bool) -> type[msgspec.Struct]:
    fields: list[tuple[str, object, object]] = []
    if sampling:
        fields += [(f.name, msgspec.Raw, _ABSENT_RAW) for f in FIELDS]
    if routing:
        fields += [
            ("model", _Model, None),
            ("stream", _Stream, None),
            ("max_tokens", _MaxTokens, None),
            ("max_completion_tokens", _MaxCompletionTokens, None),
        ]
    if nested:
        fields.append(("sampling_params", msgspec.Raw, _ABSENT_RAW))
    return msgspec.defstruct(name, fields, gc=False)


_ChatBody = _sampling_struct("_ChatBody", routing=True, sampling=True, nested=False)
_GenerateBody = _sampling_struct("_GenerateBody", routing=True, sampling=False, nested=True)
_SamplingParams = _sampling_struct("_SamplingParams", routing=False, sampling=True, nested=False)

# float_hook=float: a routing value like 1e400 reads as inf (as json.loads does) instead of
# failing the whole decode; sampling values are Raw and never reach it.
_CHAT_DECODER = msgspec.json.Decoder(_ChatBody, dec_hook=_on_routing_value, float_hook=float)
_GENERATE_DECODER = msgspec.json.Decoder(_GenerateBody, dec_hook=_on_routing_value, float_hook=float)
_SAMPLING_DECODER = msgspec.json.Decoder(_SamplingParams)
_STRING_DECODER = msgspec.json.Decoder(str)
_N_FIELDS: Final = len(FIELDS)
_INTEGRAL: Final = tuple(f.integral for f in FIELDS)


class Probe:
    """What the router needs from one body: routing keys and the eight sampling values."""

    __slots__ = (
        "generate",
        "insert_at",
        "max_completion_tokens",
        "max_tokens",
        "model",
        "needs_comma",
        "sampling_params",
        "states",
        "stream",
        "values",
    )

    def __init__(self) -> None:
        self.model: str | None = None
        self.stream: bool | None = None
        self.max_tokens: int | None = None
        self.max_completion_tokens: int | None = None
        # Per SPEC §2 field index: ABSENT / NUMBER / UNUSABLE, and the value where NUMBER.
        self.states: list[int] = [ABSENT] * _N_FIELDS
        self.values: list[float] = [0.0] * _N_FIELDS
        # Offset of the body's final '}' and whether a pair appended there needs a comma
        # (False only for an empty object).
        self.insert_at: int = -1
        self.needs_comma: bool = True
        self.generate: bool = False
        # /generate only: the winning sampling_params object (a zero-copy view of the body),
        # or None when it is absent or null and must be created.
        self.sampling_params: msgspec.Raw | None = None


def _read_number_literal(text: bytes, integral: bool) -> tuple[int, float]:
    """A JSON number as json.loads reads it (float() if it has a fraction or exponent, else
    int()), then as pydantic reads that Python value for the field's type."""
    if b"." in text or b"e" in text or b"E" in text:
        f = float(text)
        if math.isinf(f):
            # Beyond float range (1e400): json.loads says inf, an int field refuses it.
            return UNUSABLE, 0.0
        if integral and (not f.is_integer() or not -_I64_BOUND < f < _I64_BOUND):
            return UNUSABLE, 0.0  # pydantic float_as_int: int_from_float / int_parsing_size
        return NUMBER, f
    try:
        return _read_int(int(text))
    except ValueError:  # more digits than Python's int limit: json.loads refuses it too
        return UNUSABLE, 0.0


def _read_int(i: int) -> tuple[int, float]:
    """An int the engine holds exactly; usable only if a double holds it exactly too, since
    the router compares doubles (2**53 + 1 would otherwise compare equal to 2**53)."""
    try:
        f = float(i)
    except OverflowError:
        return UNUSABLE, 0.0
    return (NUMBER, f) if int(f) == i else (UNUSABLE, 0.0)


def _read_string(raw: msgspec.Raw, integral: bool) -> tuple[int, float]:
    try:
        s = _STRING_DECODER.decode(raw)
    except msgspec.DecodeError:  # pragma: no cover - the whole body decoded, so its strings did
        return UNUSABLE, 0.0
    if len(s) > MAX_NUMERIC_STRING_CHARS:
        return UNUSABLE, 0.0
    if integral:
        i = str_as_int(s)
        return (UNUSABLE, 0.0) if i is None else _read_int(i)
    f = str_as_float(s)  # inf and nan included: pydantic's allow_inf_nan defaults to True
    return (UNUSABLE, 0.0) if f is None else (NUMBER, f)


def _read_uncached(raw: msgspec.Raw, text: bytes, integral: bool) -> tuple[int, float]:
    first = text[0]
    if first == 0x6E:  # n: null is absent (SPEC §4), even for non-Optional fields
        return ABSENT, 0.0
    if first == 0x74:  # t: true -> 1 (pydantic lax bool -> int/float)
        return NUMBER, 1.0
    if first == 0x66:  # f: false -> 0
        return NUMBER, 0.0
    if first == 0x22:  # ": string
        return _read_string(raw, integral)
    if first == 0x5B or first == 0x7B:  # [ {: skipped by msgspec, never built
        return UNUSABLE, 0.0
    return _read_number_literal(text, integral)


# Clients repeat a handful of literals ("0.7", "1", "0.95"): readings of short values are kept,
# per field type, in a bounded table (a client cycling literals only makes it start over).
_CACHE_LIMIT: Final = 1024
_CACHED_BYTES: Final = 24
_readings: Final[tuple[dict[bytes, tuple[int, float]], dict[bytes, tuple[int, float]]]] = ({}, {})


def read_value(raw: msgspec.Raw, integral: bool) -> tuple[int, float]:
    """One sampling value (SPEC §4): null absent; numbers, bools and numeric strings read as
    the engine reads them for the field's type; anything else, or anything not read exactly,
    unusable."""
    size = len(raw)
    if size > _MAX_VALUE_BYTES:
        # Arrays, objects, strings over 64 characters and absurd number literals alike.
        return UNUSABLE, 0.0
    text = bytes(raw)
    if size > _CACHED_BYTES:
        return _read_uncached(raw, text, integral)
    table = _readings[integral]
    reading = table.get(text)
    if reading is None:
        reading = _read_uncached(raw, text, integral)
        if len(table) >= _CACHE_LIMIT:
            table.clear()
        table[text] = reading
    return reading


def _read_sampling(probe: Probe, raws: tuple[Any, ...]) -> bool:
    """Fill the probe's states/values; True when any sampling key was present."""
    states = probe.states
    values = probe.values
    present = False
    for i in range(_N_FIELDS):
        raw = raws[i]
        if raw is not _ABSENT_RAW:
            present = True
            states[i], values[i] = read_value(raw, _INTEGRAL[i])
    return present


def _routing_int(value: object) -> int | None:
    """max_tokens-like routing values as pydantic reads an int; None when it would not (the
    engine then answers for them: the router only uses these for accounting)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and -_I64_BOUND < value < _I64_BOUND:
        return int(value)
    if isinstance(value, str):
        return str_as_int(value)
    return None


def _routing_bool(value: object) -> bool | None:
    """stream as pydantic reads a bool (lax): true/false, 0/1, and its strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return str_as_bool(value)
    return None


def _read_routing(probe: Probe, seen: dict[type, object]) -> None:
    model = seen.get(_Model)
    if model is not None:
        if not isinstance(model, str):
            raise BadRequest("model must be a string")
        probe.model = model
    stream = seen.get(_Stream)
    if stream is not None:
        probe.stream = _routing_bool(stream)
        if probe.stream is None:
            raise BadRequest("stream must be a boolean")
    max_tokens = seen.get(_MaxTokens)
    if max_tokens is not None:
        probe.max_tokens = _routing_int(max_tokens)
    max_completion_tokens = seen.get(_MaxCompletionTokens)
    if max_completion_tokens is not None:
        probe.max_completion_tokens = _routing_int(max_completion_tokens)


def _locate_insertion(probe: Probe, body: bytes, has_keys: bool) -> None:
    end = len(body) - 1
    if body[end] != _CLOSE_BRACE:  # trailing whitespace: rare, copy only then
        end = len(body.rstrip(_JSON_WS)) - 1
    probe.insert_at = end
    if not has_keys:
        # No key we read: is it empty? Fails at the first quote of any other key, so O(1).
        probe.needs_comma = _EMPTY_OBJECT.fullmatch(body) is None


def probe_body(body: bytes, *, generate: bool = False) -> Probe:
    """Probe a request body (SPEC §4); ``generate`` reads the fields under ``sampling_params``.

    Raises ``BadRequest`` for a body that is not one JSON object, a repeated routing key, a
    non-string model, an unreadable stream flag, or (``generate``) a non-object sampling_params.
    """
    seen = _seen.values
    seen.clear()
    try:
        decoded = (_GENERATE_DECODER if generate else _CHAT_DECODER).decode(body)
    except (msgspec.DecodeError, RecursionError):
        raise BadRequest(_BODY_NOT_OBJECT) from None
    probe = Probe()
    has_keys = bool(seen)
    if has_keys:
        _read_routing(probe, seen)
        seen.clear()
    fields = msgspec.structs.astuple(decoded)
    if generate:
        probe.generate = True
        raw = fields[4]
        if raw is not _ABSENT_RAW:
            has_keys = True
            first = bytes(memoryview(raw)[:1])
            if first == b"{":
                probe.sampling_params = raw
                try:
                    nested = _SAMPLING_DECODER.decode(raw)
                except RecursionError:
                    raise BadRequest(_BODY_NOT_OBJECT) from None
                _read_sampling(probe, msgspec.structs.astuple(nested))
            elif first != b"n":
                raise BadRequest("sampling_params must be an object")
    elif _read_sampling(probe, fields):
        has_keys = True
    _locate_insertion(probe, body, has_keys)
    return probe
