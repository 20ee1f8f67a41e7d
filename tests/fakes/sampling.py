"""The engine's reading of sampling fields (SPEC §2 types, pydantic lax) and Hypothesis
strategies for adversarial request bodies and contracts: shared by the probe/enforce tests."""

from __future__ import annotations

import json
import math
import random

import pydantic
from hypothesis import strategies as st

from controlplane.contracts import FIELDS, Band, ConflictPolicy, Exact, ParamSpec, SamplingContract


class EngineFields(pydantic.BaseModel):
    """SPEC §2: the types of SGLang's ChatCompletionRequest for the governed fields."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n: int = 1


class OptionalFloat(pydantic.BaseModel):
    x: float | None = None


class PlainFloat(pydantic.BaseModel):
    x: float


class OptionalInt(pydantic.BaseModel):
    x: int | None = None


class PlainInt(pydantic.BaseModel):
    x: int


def pydantic_reads(model: type[pydantic.BaseModel], value: object) -> object:
    """What pydantic makes of ``value`` for field ``x`` of ``model``; the string "error" if refused."""
    try:
        return model(x=value).x  # type: ignore[call-arg]
    except pydantic.ValidationError:
        return "error"


def engine_view(body: bytes, *, generate: bool) -> dict[str, float | int] | None:
    """The governed values the engine ends up with for a forwarded body, only those the client
    (or the router) set; None when the engine refuses the body (json.loads or pydantic fails)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    if generate:
        doc = doc.get("sampling_params")
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            return None
    try:
        model = EngineFields.model_validate(doc)
    except pydantic.ValidationError:
        return None
    out: dict[str, float | int] = {}
    for f in FIELDS:
        value = getattr(model, f.name)
        if f.name in model.model_fields_set and value is not None:
            out[f.name] = value
    return out


# --- contracts ---------------------------------------------------------------------------
# Generation is driven by one Random per example seeded by Hypothesis: a Hypothesis draw per
# token costs ~20x more, and thousands of examples must fit in CI's budget. A failure reports
# its seed, which replays it exactly.

_FLOAT_DOMAINS = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (0.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
}
# Values clients are likely to collide with: exact contract values must be hit often.
_NICE = [0.0, 0.1, 0.5, 0.7, 0.95, 1.0, 1.5, 2.0, -1.0, -2.0, 1e-7, 40.0, 50.0, 128.0, -0.0]


def _contract_value(rng: random.Random, name: str, *, bound: bool = False) -> float | int:
    if name == "n":
        return rng.choice([1, 2, 4, 128, rng.randint(1, 128)])
    if name == "top_k":
        choices = [1, 40, 50, rng.randint(1, 2**20)] + ([] if bound else [-1, 2**53])
        return rng.choice(choices)
    lo, hi = _FLOAT_DOMAINS[name]
    open_low = name in ("top_p", "repetition_penalty")
    nice = [x for x in _NICE if lo <= x <= hi and not (open_low and x == 0)]
    if rng.randrange(3):
        return rng.choice(nice)
    value = rng.uniform(lo, hi)
    return value if value > 0 or not open_low else hi


def random_contract(rng: random.Random, policy: ConflictPolicy | None = None) -> SamplingContract:
    """A random valid contract: a non-empty subset of fields, exact values or bands."""
    conflict = policy if policy is not None else rng.choice(list(ConflictPolicy))
    chosen = rng.sample(FIELDS, rng.randint(1, len(FIELDS)))
    params: dict[str, ParamSpec] = {}
    for f in chosen:
        if conflict is ConflictPolicy.REJECT and rng.randrange(2):
            a, b = sorted(
                (_contract_value(rng, f.name, bound=True), _contract_value(rng, f.name, bound=True))
            )
            params[f.name] = Band(a, b, rng.choice([None, a, b]))
        else:
            params[f.name] = Exact(_contract_value(rng, f.name))
    return SamplingContract(params, conflict)


def contract_hints(contract: SamplingContract) -> list[str]:
    """JSON literals near the contract's values (equal, as strings, as bools, bounds) so that
    generated bodies often pass the contract and the injected/forwarded paths get exercised."""
    hints: list[str] = []
    for spec in contract.params.values():
        numbers = [spec.value] if isinstance(spec, Exact) else [spec.min, spec.max]
        for x in numbers:
            hints += [
                repr(x),
                repr(float(x)),
                json.dumps(str(x)),
                json.dumps(f" {x} "),
                json.dumps(repr(float(x))),
            ]
            if x in (0, 1):
                hints.append("true" if x else "false")
            if isinstance(x, float) and x.is_integer():
                hints.append(str(int(x)))
    return hints


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**64 - 1)


# --- bodies ------------------------------------------------------------------------------

_ROUTING = ["model", "stream", "max_tokens", "max_completion_tokens"]
_OTHER_KEYS = ["messages", "prompt", "x", "Temperature", "temperature ", "top-p", "sampling_params", ""]
_FIELD_NAMES = [f.name for f in FIELDS]
_KEYS = _FIELD_NAMES * 2 + _OTHER_KEYS
_WS = ["", "", "", "", " ", "\n", "\t", " \r\n "]

# Pieces pydantic's number parsers care about, for numeric-looking strings.
_PIECES = [*list("0123456789"), "_", ".", "e", "E", "-", "+", " ", "\t", "\xa0", "\u3000", "\x1c"]
_PIECES += ["inf", "nan", "Infinity", "0x", "1_0", "1.0", "00", "\u0661"]
_STRINGS = ["0.5", "1", "1.0", " 1.5 ", "1_0", "1e0", "true", "-0", "nan", "inf", "0.95", "40", "", " 40 "]
_NUMBERS = [
    "0",
    "-0",
    "-0.0",
    "1",
    "1.0",
    "2",
    "1e0",
    "1E0",
    "0.95",
    "40",
    "40.0",
    "1e400",
    "-1e400",
    "1e-400",
    "9007199254740993",
    "9223372036854775808",
    "18446744073709551616",
    "1e19",
    "0.5e1",
    "128",
    "129",
    "1" + "0" * 30,
    "0.1000000000000000055511151231257827",
    "0.7",
    "0.69999999999999995559",
    "-1",
    "1.5",
    "0.1",
    "1e-7",
    "1E-7",
    "50",
    "4",
    "2.0",
    "0e5",
    "-2",
    "128.0",
]


def _escape(rng: random.Random, text: str) -> str:
    """JSON string text for ``text``; sometimes with characters written as \\u escapes."""
    mode = rng.randrange(4)  # 0, 1: plain; 2: some escaped; 3: all escaped
    out = []
    for ch in text:
        if ord(ch) < 0x10000 and (mode == 3 or (mode == 2 and rng.randrange(2))):
            code = f"{ord(ch):04x}"
            out.append("\\u" + (code.upper() if rng.randrange(2) else code))
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return '"' + "".join(out) + '"'


def _string_text(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind <= 1:
        return "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 6)))
    if kind == 2:
        return rng.choice(_STRINGS)
    if kind == 3:
        return "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 4)))
    if kind == 4:
        return "1" * rng.randint(60, 70)
    return " " * rng.randint(55, 66) + "1"


def _number(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind <= 1:
        return rng.choice(_NUMBERS)
    if kind == 2:
        return str(rng.randint(-(2**70), 2**70) >> rng.randrange(70))
    if kind == 3:
        return repr(rng.uniform(-3, 3))
    return repr(rng.choice([1.0, -1.0]) * float(f"1e{rng.randint(-330, 310)}"))


def _value(rng: random.Random, depth: int = 0, hints: list[str] | None = None) -> str:
    if hints and rng.randrange(2):
        return rng.choice(hints)
    kind = rng.randrange(8 if depth < 2 else 6)
    if kind == 0:
        return rng.choice(["null", "true", "false"])
    if kind <= 2:
        return _number(rng)
    if kind <= 5:
        return _escape(rng, _string_text(rng))
    if kind == 6:
        return "[" + ",".join(_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    return _object(rng, [(rng.choice(_KEYS), _value(rng, depth + 1)) for _ in range(rng.randint(0, 4))])


def _object(rng: random.Random, pairs: list[tuple[str, str]]) -> str:
    ws = _WS
    body = ",".join(
        f"{rng.choice(ws)}{_escape(rng, k)}{rng.choice(ws)}:{rng.choice(ws)}{v}" for k, v in pairs
    )
    return "{" + body + rng.choice(ws) + "}"


def random_chat_body(rng: random.Random, hints: list[str] | None = None) -> bytes:
    """Top-level fields: sampling keys (repeated, escaped), at most one of each routing key."""
    pairs = [(rng.choice(_KEYS), _value(rng, 0, hints)) for _ in range(rng.randint(0, 8))]
    for name in rng.sample(_ROUTING, rng.randint(0, 2)):
        pairs.insert(
            rng.randrange(len(pairs) + 1), (name, rng.choice(['"m"', "true", "false", "null", "16"]))
        )
    return (rng.choice(_WS) + _object(rng, pairs) + rng.choice(_WS)).encode()


def random_generate_body(rng: random.Random, hints: list[str] | None = None) -> bytes:
    """/generate: sampling_params absent, null, not an object, an adversarial object, or repeated."""
    pairs = [("text", '"hello"')]
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        kind = rng.randrange(6)
        if kind == 0:
            params = rng.choice(["null", "{}", "{ }", "[]", '"x"'])
        else:
            params = _object(
                rng, [(rng.choice(_KEYS), _value(rng, 1, hints)) for _ in range(rng.randint(0, 6))]
            )
        pairs.append(("sampling_params", params))
    for name in rng.sample(_ROUTING + _FIELD_NAMES, rng.randint(0, 2)):
        pairs.append((name, rng.choice(['"m"', "true", "1", "null"])))
    rng.shuffle(pairs)
    return _object(rng, pairs).encode()


def values_equal(a: float, b: float) -> bool:
    """Float equality as SPEC §3.3 uses it (NaN never equal)."""
    return not math.isnan(a) and a == b


# --- bodies per dialect (SPEC §5.1) -----------------------------------------------------------
_MESSAGE_LIST = '[{"role":"user","content":"hi"}]'
# The keys each route needs to answer at all (else every body would be refused: vacuous).
_REQUIRED: dict[str, list[tuple[str, str]]] = {
    "chat": [("model", '"m"'), ("messages", _MESSAGE_LIST)],
    "completions": [("model", '"m"'), ("prompt", '"hi"')],
    "responses": [("model", '"m"'), ("input", '"hi"')],
    "messages": [("model", '"m"'), ("max_tokens", "8"), ("messages", _MESSAGE_LIST)],
}
_TOP_ROUTING = {
    "chat": ["stream", "max_tokens", "max_completion_tokens"],
    "completions": ["stream", "max_tokens"],
    "responses": ["stream"],
    "messages": ["stream"],
}


def _sampling_pairs(rng: random.Random, hints: list[str] | None, most: int) -> list[tuple[str, str]]:
    return [(rng.choice(_KEYS), _value(rng, 1, hints)) for _ in range(rng.randint(0, most))]


# Keys an object of sampling parameters also holds (SamplingParams takes them; ``stop`` a string).
_PARAM_KEYS = ["stop", "max_new_tokens", "regex"]


def contract_fit(contract: SamplingContract) -> list[tuple[str, str]]:
    """The contracted fields with values the contract accepts, as JSON pairs: an object holding
    only these needs no injection (the router forwards it as it is)."""
    pairs = []
    for name, spec in contract.params.items():
        value = spec.value if isinstance(spec, Exact) else spec.min
        pairs.append((name, json.dumps(value)))
    return pairs


def _container(rng: random.Random, hints: list[str] | None, fit: list[tuple[str, str]] | None = None) -> str:
    """A value for a key that should hold an object of sampling fields: mostly such an object
    (adversarial keys and values), sometimes one that already fits the contract next to one
    other parameter, sometimes null, empty, or not an object at all."""
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice(["null", "{}", "{ }", "[]", '"x"', "1"])
    if kind == 1 and fit:
        pairs = [*fit, (rng.choice(_PARAM_KEYS), rng.choice(['"x"', "4", "null"]))]
        rng.shuffle(pairs)
        return _object(rng, pairs)
    pairs = _sampling_pairs(rng, hints, 6)
    if rng.randrange(4) == 0:
        pairs.append((rng.choice(_PARAM_KEYS), rng.choice(['"x"', "4"])))
    return _object(rng, pairs)


def _with_required(rng: random.Random, pairs: list[tuple[str, str]], required: list[tuple[str, str]]) -> str:
    if rng.randrange(10):  # now and then a body missing what the route needs
        for pair in required:
            pairs.insert(rng.randrange(len(pairs) + 1), pair)
    return _object(rng, pairs)


def random_top_level_body(
    rng: random.Random, dialect: str, hints: list[str] | None = None, fit: list[tuple[str, str]] | None = None
) -> bytes:
    """chat, completions, responses, messages: the fields at the top level, next to the keys the
    route needs; sampling keys repeated and escaped, routing keys at most once."""
    pairs = [*fit] if fit and rng.randrange(8) == 0 else _sampling_pairs(rng, hints, 8)
    for name in rng.sample(_TOP_ROUTING[dialect], rng.randint(0, 1)):
        pairs.append((name, rng.choice(["true", "false", "null", "16"])))
    return _with_required(rng, pairs, _REQUIRED[dialect]).encode()


def random_ollama_body(
    rng: random.Random, hints: list[str] | None = None, fit: list[tuple[str, str]] | None = None
) -> bytes:
    """Ollama: the fields under options (absent, null, repeated, not an object), top-level
    sampling keys that the engine ignores, stream on or off."""
    pairs = _sampling_pairs(rng, hints, 2)
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        pairs.append(("options", _container(rng, hints, fit)))
    if rng.randrange(2):
        pairs.append(("stream", rng.choice(["true", "false"])))
    return _with_required(rng, pairs, [("model", '"m"'), ("messages", _MESSAGE_LIST)]).encode()


def _prompt_and_params(rng: random.Random, hints: list[str] | None) -> tuple[list[tuple[str, str]], int]:
    """A prompt (one text, a batch of texts, or token ids of either shape) and how many prompts."""
    kind = rng.randrange(5)
    if kind <= 1:
        return [("text", '"hi"')], 1
    if kind == 2:
        k = rng.randint(1, 3)
        return [("text", "[" + ",".join(['"hi"'] * k) + "]")], k
    if kind == 3:
        return [("input_ids", "[1,2]")], 1
    k = rng.randint(1, 3)
    return [("text", "null"), ("input_ids", "[" + ",".join(["[1,2]"] * k) + "]")], k


def _sampling_params(
    rng: random.Random, hints: list[str] | None, prompts: int, fit: list[tuple[str, str]] | None
) -> str:
    """sampling_params: an object, or a list (one per prompt, sometimes of another length, with
    null or non-object elements)."""
    if rng.randrange(3):
        return _container(rng, hints, fit)
    size = prompts if rng.randrange(4) else rng.randint(0, 3)
    elements = [
        _container(rng, hints, fit) if rng.randrange(6) else rng.choice(["null", "1"]) for _ in range(size)
    ]
    return "[" + ",".join(elements) + "]"


def random_generate_dialect_body(
    rng: random.Random, hints: list[str] | None = None, fit: list[tuple[str, str]] | None = None
) -> bytes:
    """/generate: one prompt or a batch, sampling_params an object or a list, repeated or not."""
    pairs, prompts = _prompt_and_params(rng, hints)
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        pairs.append(("sampling_params", _sampling_params(rng, hints, prompts, fit)))
    pairs += _sampling_pairs(rng, hints, 2)  # top-level sampling keys: not where /generate reads
    rng.shuffle(pairs)
    return _object(rng, pairs).encode()


def random_vertex_body(
    rng: random.Random, hints: list[str] | None = None, fit: list[tuple[str, str]] | None = None
) -> bytes:
    """Vertex predict: instances (the prompts), parameters holding sampling_params (object or
    list), sometimes a prompt key of its own, sometimes absent or null."""
    k = rng.randint(1, 3)
    instances = "[" + ",".join(['{"text":"hi"}'] * k) + "]"
    pairs: list[tuple[str, str]] = [("instances", instances if rng.randrange(8) else "[{}]")]
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        if rng.randrange(8) == 0:
            pairs.append(("parameters", rng.choice(["null", "{}", "[]"])))
            continue
        inner = [("sampling_params", _sampling_params(rng, hints, k, fit))] if rng.randrange(6) else []
        if rng.randrange(6) == 0:
            inner.append(("text", '"hi"'))
        inner += [("max_new_tokens", "4")] * rng.randrange(2)
        rng.shuffle(inner)
        pairs.append(("parameters", _object(rng, inner)))
    rng.shuffle(pairs)
    return _object(rng, pairs).encode()


FORM_BOUNDARY = "fuzzb0undary"
FORM_CONTENT_TYPE = f"multipart/form-data; boundary={FORM_BOUNDARY}"


def random_transcription_body(
    rng: random.Random, hints: list[str] | None = None, fit: list[tuple[str, str]] | None = None
) -> bytes:
    """The transcription form: the audio file, model, and temperature fields repeated, empty,
    numeric-looking strings or uploads."""
    fields: list[tuple[str, str, bool]] = []
    for _ in range(rng.randint(0, 3)):
        if hints and rng.randrange(2):
            text = rng.choice(hints).strip('"')
        else:
            text = _string_text(rng) if rng.randrange(3) else _number(rng)
        fields.append(("temperature", text, rng.randrange(10) == 0))
    if rng.randrange(2):
        fields.append(("model", "whisper", False))
    rng.shuffle(fields)
    if rng.randrange(10):
        fields.insert(rng.randrange(len(fields) + 1), ("file", "RIFF....WAVE", True))
    parts = []
    for name, value, upload in fields:
        disposition = f'form-data; name="{name}"' + ('; filename="a.wav"' if upload else "")
        parts.append(f"--{FORM_BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n{value}\r\n")
    return ("".join(parts) + f"--{FORM_BOUNDARY}--\r\n").encode("utf-8", "surrogatepass")
