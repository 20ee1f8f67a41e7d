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
  its own marker type and msgspec hands every occurrence to ``_Routing.on_value`` (its
  ``dec_hook``), which refuses a second one. Routing values are small scalars. The hook gets no
  context from msgspec: each thread decodes with its own top-level decoders, whose hook is that
  thread's ``_Routing`` (one thread-local lookup per body, none per key).
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
from dataplane.router.contract.dialects import CHAT, DIALECTS, BatchRule, Dialect

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
_AT_BYTE = re.compile(r" \(byte (\d+)\)$")


def _not_an_object(body: bytes, error: msgspec.DecodeError | RecursionError) -> BadRequest:
    """The 400 for a body that is not one JSON object, saying what is wrong and where (the byte
    offset msgspec reports), so a client can find the mistake in its body."""
    if not body.strip():
        return BadRequest(f"{_BODY_NOT_OBJECT}: the body is empty")
    if isinstance(error, RecursionError):
        return BadRequest(f"{_BODY_NOT_OBJECT}: nested too deeply")
    text = str(error).removeprefix("JSON is malformed: ")
    if text == "Input data was truncated":
        text = "it ends before the JSON does"
    text = _AT_BYTE.sub(r" at byte \1", text)
    return BadRequest(f"{_BODY_NOT_OBJECT}: {text[:1].lower()}{text[1:]}")


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
# What the hook hands back for each key (msgspec checks it is an instance of the key's type).
_MODEL: Final = _Model()
_STREAM: Final = _Stream()
_MAX_TOKENS: Final = _MaxTokens()
_MAX_COMPLETION_TOKENS: Final = _MaxCompletionTokens()


class _Routing:
    """The routing keys met by one thread's decode in progress: their values as msgspec decoded
    them (read by ``_read_routing`` once the body decoded), and one bit per key met (``seen``).

    Fields and identity tests rather than a dict keyed by marker type: compiled
    (scripts/build_mypyc.sh), these are field stores and pointer compares, where the dict cost
    a hash lookup per key met and per key read.
    """

    __slots__ = ("max_completion_tokens", "max_tokens", "model", "seen", "stream")

    def __init__(self) -> None:
        self.seen = 0
        self.model: object = None
        self.stream: object = None
        self.max_tokens: object = None
        self.max_completion_tokens: object = None

    def on_value(self, kind: type, value: object) -> object:
        """The decoders' ``dec_hook``: called by msgspec once per occurrence of a routing key,
        null included, in body order."""
        if kind is _Model:
            self._meet(1, kind)
            self.model = value
            return _MODEL
        if kind is _Stream:
            self._meet(2, kind)
            self.stream = value
            return _STREAM
        if kind is _MaxTokens:
            self._meet(4, kind)
            self.max_tokens = value
            return _MAX_TOKENS
        self._meet(8, kind)
        self.max_completion_tokens = value
        return _MAX_COMPLETION_TOKENS

    def _meet(self, bit: int, kind: type) -> None:
        if self.seen & bit:
            # SPEC §4: a repeated routing key is a 400 (even {"stream":null,"stream":true}).
            raise BadRequest(f'repeated routing key "{_ROUTING_NAMES[kind]}"')
        self.seen |= bit

    def clear(self) -> None:
        self.seen = 0
        self.model = self.stream = self.max_tokens = self.max_completion_tokens = None


def _struct(name: str, fields: list[tuple[str, object, object]]) -> type[msgspec.Struct]:
    return msgspec.defstruct(name, fields, gc=False)


def _top_decoder(top: type[msgspec.Struct], routing: _Routing | None) -> msgspec.json.Decoder[Any]:
    """The decoder of a body's top level, handing routing keys to ``routing``."""
    return msgspec.json.Decoder(
        top,
        # float_hook=float: a routing value like 1e400 reads as inf (as json.loads does)
        # instead of failing the whole decode; sampling values are Raw and never reach it.
        dec_hook=routing.on_value if routing is not None else None,
        float_hook=float,
    )


_ROUTING_TYPES: Final[dict[str, type]] = {name: kind for kind, name in _ROUTING_NAMES.items()}


# The engine's prompt keys, in the order it looks at them (``_determine_batch_size``), with the
# nesting that makes each a batch: text a list, input_ids a list of lists, input_embeds a list of
# lists of lists.
_PROMPT_KEYS: Final = ("text", "input_ids", "input_embeds")
_BATCH_SHAPES: Final = (
    re.compile(rb"\["),
    re.compile(rb"\[[ \t\r\n]*\["),
    re.compile(rb"\[[ \t\r\n]*\[[ \t\r\n]*\["),
)


class _Level:
    """One object on a dialect's way to its fields: the decoder of that object and where its
    values land. ``fields``: SPEC §2 indices of the sampling keys it holds, in Struct order
    (first in the Struct); ``next_key``: the container key to go down (last in the Struct)."""

    __slots__ = ("decoder", "fields", "next_key")

    def __init__(
        self, decoder: msgspec.json.Decoder[Any], fields: tuple[int, ...], next_key: str | None
    ) -> None:
        self.decoder = decoder
        self.fields = fields
        self.next_key = next_key


class _Plan:
    """A dialect compiled into decoders, built once (msgspec: codecs built once)."""

    __slots__ = ("dialect", "levels", "routing", "top", "top_is_leaf")
    levels: tuple[_Level, ...]
    top: type[msgspec.Struct]
    top_is_leaf: bool

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        carried = [f for f in FIELDS if f.name in dialect.carried]
        sampling: list[tuple[str, object, object]] = [(f.name, msgspec.Raw, _ABSENT_RAW) for f in carried]
        indices = tuple(f.index for f in carried)
        routing: list[tuple[str, object, object]] = [(k, _ROUTING_TYPES[k], None) for k in dialect.routing]
        self.routing = bool(routing)
        keys = dialect.container
        levels: list[_Level] = []
        # Batches: the prompt keys, read (as views) where the dialect keeps them, before the
        # container key, which stays last in its Struct.
        prompts: list[tuple[str, object, object]] = [(k, msgspec.Raw, _ABSENT_RAW) for k in _PROMPT_KEYS]

        def at(depth: int) -> list[tuple[str, object, object]]:
            return prompts if dialect.batch_rule is not None and depth == dialect.prompt_depth else []

        # The top level: the fields themselves (top-level dialects) or the first container key.
        top = sampling + routing if not keys else [*routing, *at(0), (keys[0], msgspec.Raw, _ABSENT_RAW)]
        self.top = _struct(f"_{dialect.name}_body", top)
        # With routing keys, each thread decodes the top level with its own decoder
        # (``_top_decoder``): this one is never used; without, every thread shares it.
        levels.append(
            _Level(_top_decoder(self.top, None), () if keys else indices, keys[0] if keys else None)
        )
        for depth, key in enumerate(keys[1:], start=1):
            inner = _struct(
                f"_{dialect.name}_{keys[depth - 1]}", [*at(depth), (key, msgspec.Raw, _ABSENT_RAW)]
            )
            levels.append(_Level(msgspec.json.Decoder(inner), (), key))
        if keys:
            leaf = _struct(f"_{dialect.name}_{keys[-1]}", sampling)
            levels.append(_Level(msgspec.json.Decoder(leaf), indices, None))
        self.levels = tuple(levels)
        self.top_is_leaf = not keys


_PLANS: Final = tuple(_Plan(d) for d in DIALECTS.values())  # by Dialect.index


class _Thread:
    """What ``probe_body`` needs first, for the thread it runs in: one tuple per dialect
    (unpacked at once: cheaper than the attribute reads on the per-request path): the top level's
    decode (this thread's for a dialect with routing keys), its field indices (None for nested
    dialects), the dialect's gate flag, the plan; and the routing keys its decodes meet."""

    __slots__ = ("ident", "routing", "tops")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.routing = routing = _Routing()
        self.tops = tuple(
            (
                _top_decoder(p.top, routing).decode if p.routing else p.levels[0].decoder.decode,
                p.levels[0].fields if p.top_is_leaf else None,
                p.dialect.gate,
                p,
            )
            for p in _PLANS
        )


class _Last:
    """The thread that probed last: the router probes every body in one thread, found by its
    id (~150 instructions compiled) rather than through the ``threading.local`` (~470)."""

    __slots__ = ("thread",)

    def __init__(self) -> None:
        self.thread = _Thread(-1)  # no thread has this id


_threads: Final = threading.local()
_last: Final = _Last()
_get_ident: Final = threading.get_ident


def _this_thread() -> _Thread:
    ident = _get_ident()
    last = _last.thread
    if last.ident == ident:
        return last
    found: _Thread | None = getattr(_threads, "probe", None)
    if found is None:
        found = _threads.probe = _Thread(ident)
    _last.thread = found  # one store: another thread reads the old one or this one, never half
    return found


_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
# Bound once: compiled (scripts/build_mypyc.sh), ``msgspec.structs.astuple`` is two generic
# attribute lookups per call.
_astuple: Final = msgspec.structs.astuple
_STRING_DECODER = msgspec.json.Decoder(str)
_N_FIELDS: Final = len(FIELDS)
_INTEGRAL: Final = tuple(f.integral for f in FIELDS)


# A reading before any sampling key is read: every field absent. Shared by the probes of
# ``probe_body`` until ``_read_fields`` writes (it copies them then); never mutated.
_BLANK_STATES: Final[list[int]] = [ABSENT] * _N_FIELDS
_BLANK_VALUES: Final[list[float]] = [0.0] * _N_FIELDS


class Reading:
    """The sampling values of one object holding them: per SPEC §2 index ABSENT / NUMBER /
    UNUSABLE, and the value where NUMBER. ``raw``: that object (a zero-copy view of the
    body), or None when it is absent or null and must be created to inject."""

    __slots__ = ("raw", "states", "values")

    def __init__(self, raw: msgspec.Raw | None = None) -> None:
        self.raw = raw
        self.states: list[int] = _BLANK_STATES[:]
        self.values: list[float] = _BLANK_VALUES[:]


_NO_CHAIN: Final[list[msgspec.Raw | None]] = []  # top-level dialects (never mutated)


class Probe(Reading):
    """What the router needs from one body (SPEC §4): routing keys, and the sampling values of
    the object holding them (the probe is that ``Reading``; a batch has one per element)."""

    __slots__ = (
        "batch",
        "chain",
        "dialect",
        "insert_at",
        "max_completion_tokens",
        "max_tokens",
        "model",
        "needs_comma",
        "stream",
    )

    def __init__(self, dialect: Dialect, blank: bool = False) -> None:
        """``blank``: ``states`` and ``values`` are the shared all-absent lists until
        ``_read_fields`` first writes (``probe_body``'s probes: most bodies carry no sampling
        key, and two lists per body cost more than the rest of the probe); else its own."""
        # Base-class state, set inline (no super() call on the per-request path).
        self.raw = None
        if blank:
            self.states = _BLANK_STATES
            self.values = _BLANK_VALUES
        else:
            self.states = _BLANK_STATES[:]
            self.values = _BLANK_VALUES[:]
        self.dialect = dialect
        self.model: str | None = None
        self.stream: bool | None = None
        self.max_tokens: int | None = None
        self.max_completion_tokens: int | None = None
        # Nested dialects: the winning value of each container key on the way down (views of
        # the body), None where absent or null.
        self.chain = _NO_CHAIN
        # A batch (the innermost container was a list): one reading per element; else None.
        self.batch: list[Reading] | None = None
        # Offset of the body's final '}' and whether a pair appended there needs a comma
        # (False only for an empty object).
        self.insert_at: int = -1
        self.needs_comma: bool = True


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


def _read_lax(raw: msgspec.Raw, text: bytes, integral: bool) -> tuple[int, float]:
    """A value as the route's pydantic model reads it in lax mode (SPEC §4)."""
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


def _read_gate(raw: msgspec.Raw, text: bytes, integral: bool) -> tuple[int, float]:
    """A value as the ``/generate`` schema gate takes it (SPEC §4): a JSON number, and for an
    int field a JSON integer (``40.0`` and ``4e1`` refused); null absent; anything else
    unusable. Dict-typed containers (Ollama ``options``, Vertex ``parameters``) hand values to
    ``SamplingParams`` as they are, where a bool is sampled as a number and a string never is:
    read there the same way, so neither is read as a number."""
    first = text[0]
    if first == 0x6E:  # null
        return ABSENT, 0.0
    if first != 0x2D and not 0x30 <= first <= 0x39:  # not a number literal
        return UNUSABLE, 0.0
    if integral and (b"." in text or b"e" in text or b"E" in text):
        return UNUSABLE, 0.0
    return _read_number_literal(text, integral)


# Clients repeat a handful of literals ("0.7", "1", "0.95"): readings of short values are kept,
# per reading and field type, in a bounded table (a client cycling literals only makes it start
# over). Index: integral + 2 * gate.
_CACHE_LIMIT: Final = 1024
_CACHED_BYTES: Final = 24
_readings: Final[tuple[dict[bytes, tuple[int, float]], ...]] = ({}, {}, {}, {})
_READERS: Final = (_read_lax, _read_lax, _read_gate, _read_gate)


def read_value(raw: msgspec.Raw, integral: bool, gate: bool = False) -> tuple[int, float]:
    """One sampling value (SPEC §4): null absent; numbers (and, read lax, bools and numeric
    strings) read as the engine reads them for the field's type; anything else, or anything
    not read exactly, unusable."""
    size = len(raw)
    if size > _MAX_VALUE_BYTES:
        # Arrays, objects, strings over 64 characters and absurd number literals alike.
        return UNUSABLE, 0.0
    text = bytes(raw)
    kind = integral + 2 * gate
    if size > _CACHED_BYTES:
        return _READERS[kind](raw, text, integral)
    table = _readings[kind]
    reading = table.get(text)
    if reading is None:
        reading = _READERS[kind](raw, text, integral)
        if len(table) >= _CACHE_LIMIT:
            table.clear()
        table[text] = reading
    return reading


def _read_fields(reading: Reading, raws: tuple[Any, ...], fields: tuple[int, ...], gate: bool) -> bool:
    """Fill ``reading`` from the Struct values ``raws`` (their first ``len(fields)`` are the
    sampling keys, SPEC §2 indices ``fields``); True when any sampling key was present."""
    present = False
    for slot in range(len(fields)):
        raw = raws[slot]
        if raw is not _ABSENT_RAW:
            if not present and reading.states is _BLANK_STATES:
                reading.states = _BLANK_STATES[:]  # a blank probe's first write: its own lists
                reading.values = _BLANK_VALUES[:]
            present = True
            index = fields[slot]
            reading.states[index], reading.values[index] = read_value(raw, _INTEGRAL[index], gate)
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


def _read_routing(probe: Probe, routing: _Routing) -> None:
    model = routing.model
    if model is not None:
        if not isinstance(model, str):
            raise BadRequest("model must be a string")
        probe.model = model
    stream = routing.stream
    if stream is not None:
        probe.stream = _routing_bool(stream)
        if probe.stream is None:
            raise BadRequest("stream must be a boolean")
    max_tokens = routing.max_tokens
    if max_tokens is not None:
        probe.max_tokens = _routing_int(max_tokens)
    max_completion_tokens = routing.max_completion_tokens
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


def _first_byte(raw: msgspec.Raw) -> int:
    return memoryview(raw)[0]


def _decode_object(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw) -> tuple[Any, ...]:
    try:
        return _astuple(decoder.decode(raw))
    except RecursionError:
        raise BadRequest(_BODY_NOT_OBJECT) from None


def _descend(probe: Probe, plan: _Plan, raw: msgspec.Raw, prompts: tuple[Any, ...]) -> None:
    """Read the fields under the container keys, from the value of the first one; ``prompts``:
    the prompt keys' values where the dialect keeps them (the body's, for depth 0)."""
    dialect = plan.dialect
    keys = dialect.container
    gate = dialect.gate
    levels = plan.levels
    chain: list[msgspec.Raw | None] = []
    probe.chain = chain
    for depth in range(1, len(levels)):
        key = keys[depth - 1]
        first = _first_byte(raw) if raw is not _ABSENT_RAW else 0x6E
        if first == 0x6E:  # absent or null: created, with every field absent (SPEC §3.3)
            chain.append(None)
            return
        level = levels[depth]
        if first == 0x5B and dialect.batch and level.next_key is None:  # [: a batch
            if not _batch_of_prompts(dialect, prompts):
                raise BadRequest(
                    f"{key} is a list, but the request is not a batch of prompts: "
                    "send one object for one prompt (the engine would not read a list there)"
                )
            chain.append(raw)
            probe.batch = _read_batch(key, level, raw, gate)
            return
        if first != 0x7B:
            what = (
                "an object or a list of objects" if dialect.batch and level.next_key is None else "an object"
            )
            raise BadRequest(f"{key} must be {what}")
        chain.append(raw)
        values = _decode_object(level.decoder, raw)
        if level.next_key is None:
            probe.raw = raw
            _read_fields(probe, values, level.fields, gate)
            return
        if depth == dialect.prompt_depth:
            prompts = values[-4:-1]
        raw = values[-1]


def _batch_of_prompts(dialect: Dialect, prompts: tuple[Any, ...]) -> bool:
    """Whether the engine reads a list of sampling objects one per prompt (``BatchRule``)."""
    present = [
        (raw, shape) for raw, shape in zip(prompts, _BATCH_SHAPES, strict=True) if raw is not _ABSENT_RAW
    ]
    if dialect.batch_rule is BatchRule.NO_PROMPT_KEYS:
        return not present
    for raw, shape in present:
        if _first_byte(raw) != 0x6E:  # the first non-null one decides
            return shape.match(memoryview(raw)[:64]) is not None
    return False


def _read_batch(key: str, level: _Level, raw: msgspec.Raw, gate: bool) -> list[Reading]:
    """A batch: one object (or null) per prompt, each judged and injected into on its own."""
    try:
        elements = _RAW_LIST_DECODER.decode(raw)
    except RecursionError:
        raise BadRequest(_BODY_NOT_OBJECT) from None
    if not elements:
        # Nothing to inject into: the engine would sample with its own values.
        raise BadRequest(f"{key} must not be an empty list")
    batch: list[Reading] = []
    for element in elements:
        first = _first_byte(element)
        if first == 0x6E:
            batch.append(Reading())
        elif first == 0x7B:
            reading = Reading(element)
            _read_fields(reading, _decode_object(level.decoder, element), level.fields, gate)
            batch.append(reading)
        else:
            raise BadRequest(f"{key} must be an object or a list of objects")
    return batch


def probe_body(body: bytes, dialect: Dialect = CHAT) -> Probe:
    """Probe a JSON request body for ``dialect`` (SPEC §4, §5.1).

    Raises ``BadRequest`` for a body that is not one JSON object, a repeated routing key, a
    non-string model, an unreadable stream flag, or a container key holding something else
    than an object (or, for a batch, a non-empty list of objects).
    """
    thread = _this_thread()
    decode, fields, gate, plan = thread.tops[dialect.index]
    routing = thread.routing
    if routing.seen:
        routing.clear()  # a decode refused midway (a repeated key) left its keys behind
    try:
        decoded = decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        routing.clear()
        raise _not_an_object(body, error) from None
    probe = Probe(dialect, True)
    has_keys = routing.seen != 0
    if has_keys:
        try:
            _read_routing(probe, routing)
        finally:
            routing.clear()
    values = _astuple(decoded)
    if fields is not None:
        if _read_fields(probe, values, fields, gate):
            has_keys = True
    else:
        raw = values[-1]
        if raw is not _ABSENT_RAW:
            has_keys = True
        _descend(probe, plan, raw, values[-4:-1] if dialect.prompt_depth == 0 else ())
    _locate_insertion(probe, body, has_keys)
    return probe
