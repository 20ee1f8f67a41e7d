"""Contract enforcement and injection (SPEC §3.3), on a probed body (``probe``).

A contract is compiled once per snapshot (``compile_contract``): per field, the action table of
§3.3, the pre-rendered injection pair and the static parts of the messages. ``enforce`` then
only walks that table: it raises ``SamplingContractViolation`` (every violated field listed,
the first in §2 order reported), or returns the body to forward: the very same object when
nothing is injected, else the body with the pairs spliced in before its final ``}`` (a large
body as a ``SplicedBody``: views of the client's bytes around the injected ones, not a copy).

Why splicing is safe: the engine parses with ``json.loads`` (last key wins), so pairs appended
at the end of the object override whatever the client wrote earlier under the same key, in
whatever spelling (escapes included). For ``/generate`` the fields live one level down: the
winning ``sampling_params`` object is written again as the object's last pair, with the pairs
appended inside it, so it overrides the client's (or creates it when absent or null).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import msgspec

from controlplane.contracts.fields import FIELD_BY_NAME
from controlplane.contracts.formatting import format_number
from controlplane.contracts.model import Band, ConflictPolicy, Exact, SamplingContract
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.body import RequestBody, Segment, SplicedBody, body_segments
from dataplane.router.contract.dialects import DIALECTS, Dialect
from dataplane.router.contract.form import FormProbe, check_injected, form_part
from dataplane.router.contract.probe import ABSENT, NUMBER, Probe, Reading

_EMPTY_OBJECT = re.compile(rb"\{[ \t\r\n]*\}")
# Bodies from this size on are spliced as segments; below it one concatenation is cheaper than
# handling segments downstream (and the h1 writer copies head + body into one write anyway).
SEGMENTED_FROM: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class FieldRule:
    """One governed field, compiled: what to inject when absent and how to judge a value."""

    index: int
    name: str
    # The pair injected when the client omits the field (``"temperature":1.0``), or None.
    inject: bytes | None
    literal: bytes | None  # the injected value alone (``1.0``), for forms
    # Judge a present value? False under ``allow`` (pass unchanged, SPEC §3.3).
    judge: bool
    lo: float
    hi: float  # exact values have lo == hi
    exact: bool
    prefix: str  # "<field> violates this deployment's sampling contract: "
    want: str  # exact: the contracted value as printed; band: "between <lo> and <hi>"


@dataclass(frozen=True, slots=True)
class DialectRules:
    """A contract as one dialect applies it (SPEC §5.1)."""

    # The rules of the fields the dialect carries, flattened for the hot loop (tuple unpacking
    # beats attribute access): (index, inject, judge, lo, hi, rule); ``inject`` is the pair to
    # append (``"top_p":0.95``), or for a form the value alone.
    table: tuple[tuple[int, bytes | None, bool, float, float, FieldRule], ...]
    # Contracted fields the dialect cannot carry that the contract needs sent (exact values,
    # bands with a default): every request on such a route violates them.
    refused: tuple[FieldRule, ...]
    # What a top-level dialect splices in, rendered once per set of absent fields: key
    # ``mask << 1 | comma``, bit i of ``mask`` for ``table[i]`` injected, ``comma`` for a body
    # that needs one before the pairs (``_insertion``). At most 2 ** (len(table) + 1) entries.
    insertions: dict[int, bytes] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompiledContract:
    """A contract ready for the hot path, tagged with where it came from."""

    scope: str
    revision: int
    contract: SamplingContract
    rules: tuple[FieldRule, ...]
    # Per dialect, by ``Dialect.index``.
    dialects: tuple[DialectRules, ...]


def _literal(value: float | int, integral: bool) -> bytes:
    # Integral fields are injected as integers (SPEC §3.1); floats as their shortest repr,
    # which json.loads reads back as exactly the same double.
    return str(int(value) if integral else float(value)).encode()


def _dialect_rules(rules: tuple[FieldRule, ...], dialect: Dialect) -> DialectRules:
    table = []
    refused = []
    for rule in rules:
        if rule.name in dialect.carried:
            inject = rule.inject
            if dialect.form and rule.literal is not None:
                inject = form_part(rule.name, rule.literal)
            table.append((rule.index, inject, rule.judge, rule.lo, rule.hi, rule))
        elif rule.inject is not None:
            refused.append(rule)  # a band without default passes: nothing needs sending
    return DialectRules(tuple(table), tuple(refused))


def compile_contract(contract: SamplingContract, *, scope: str, revision: int) -> CompiledContract:
    """Precompute the per-field actions of SPEC §3.3, per dialect, for one contract snapshot."""
    judge = contract.conflict is ConflictPolicy.REJECT
    rules: list[FieldRule] = []
    for name, spec in contract.params.items():  # §2 order (SamplingContract keeps it)
        field = FIELD_BY_NAME[name]
        key = b'"' + name.encode() + b'":'
        prefix = f"{name} violates this deployment's sampling contract: "
        if isinstance(spec, Exact):
            value = float(spec.value)
            literal = _literal(spec.value, field.integral)
            rules.append(
                FieldRule(
                    field.index,
                    name,
                    key + literal,
                    literal,
                    judge,
                    value,
                    value,
                    True,
                    prefix,
                    format_number(spec.value),
                )
            )
        else:
            assert isinstance(spec, Band)
            literal_or_none = None if spec.default is None else _literal(spec.default, field.integral)
            rules.append(
                FieldRule(
                    field.index,
                    name,
                    None if literal_or_none is None else key + literal_or_none,
                    literal_or_none,
                    judge,
                    float(spec.min),
                    float(spec.max),
                    False,
                    prefix,
                    f"between {format_number(spec.min)} and {format_number(spec.max)}",
                )
            )
    frozen = tuple(rules)
    by_dialect = tuple(_dialect_rules(frozen, d) for d in DIALECTS.values())
    return CompiledContract(scope, revision, contract, frozen, by_dialect)


# Messages already written, by what they say: a client repeating one wrong value is answered
# without rendering it again (``format_number`` goes through ``Decimal``: ~8k instructions a
# rejection). Zero is never a key: 0.0 == -0.0, and they print as "0" and "-0". Cleared when full.
_MESSAGES: Final[dict[tuple[str, str, bool, int, float], str]] = {}
_MAX_MESSAGES: Final = 1024


def _violation_message(rule: FieldRule, state: int, value: float) -> str:
    if state != NUMBER or value == 0.0:
        return _message(rule, state, value)
    key = (rule.prefix, rule.want, rule.exact, state, value)
    message = _MESSAGES.get(key)
    if message is None:
        if len(_MESSAGES) >= _MAX_MESSAGES:
            _MESSAGES.clear()
        message = _MESSAGES[key] = _message(rule, state, value)
    return message


def _message(rule: FieldRule, state: int, value: float) -> str:
    if state == NUMBER:
        got = format_number(value)
        if rule.exact:
            return f"{rule.prefix}got {got}, expected {rule.want} (or omit the field)"
        return f"{rule.prefix}must be {rule.want}, got {got}"
    if rule.exact:
        return f"{rule.prefix}expected {rule.want} (or omit the field), got a non-numeric value"
    return f"{rule.prefix}must be a number {rule.want}, got a non-numeric value"


def _cannot_carry(rule: FieldRule, dialect: Dialect, route: str) -> str:
    instead = f"; use {dialect.instead}" if dialect.instead is not None else ""
    return f"{rule.prefix}cannot be set on {route}{instead}"


def enforce(compiled: CompiledContract, probe: Probe, body: bytes, route: str = "") -> RequestBody:
    """Judge and rewrite one probed body (SPEC §3.3, §5.1); the body to forward, or raise.

    Raises ``SamplingContractViolation`` whose ``param`` is the first violated field in §2
    order and whose ``violated`` lists all of them (a contracted field the route cannot carry
    is one, named with ``route``). Returns ``body`` itself when nothing is injected.
    """
    judged = judge(compiled, probe, body, route)
    if isinstance(judged, SamplingContractViolation):
        raise judged
    return judged


def judge(
    compiled: CompiledContract, probe: Probe, body: bytes, route: str = ""
) -> RequestBody | SamplingContractViolation:
    """``enforce`` that returns the violation instead of raising it: the request path answers it
    at once, without the traceback entries and exception state a raise costs compiled (~7k
    instructions a rejection)."""
    dialect = probe.dialect
    rules = compiled.dialects[dialect.index]
    if probe.batch is not None:
        return _enforce_batch(rules, probe, body, route)
    states = probe.states
    values = probe.values
    # The fields to inject as bits (no list per request: the rendered pairs are cached by it).
    mask = 0
    bit = 1
    violated: list[FieldRule] | None = None
    for index, inject, judge, lo, hi, rule in rules.table:
        state = states[index]
        if state == ABSENT:
            if inject is not None:
                mask |= bit
        elif judge and not (state == NUMBER and lo <= values[index] <= hi):
            # exact: lo == hi, so the test above is float equality (NaN never passes)
            if violated is None:
                violated = []
            violated.append(rule)
        bit <<= 1
    if violated is not None or rules.refused:
        return _violation(violated or [], rules.refused, probe, dialect, route)
    if not mask:
        return body
    if dialect.form:
        injected = {
            r.name: r.literal for i, _, _, _, _, r in rules.table if states[i] == ABSENT and r.literal
        }
        return splice_form(probe, body, _pairs(rules, mask), injected)
    if dialect.container or len(body) >= SEGMENTED_FROM:
        return splice(probe, body, _pairs(rules, mask))
    # ``splice`` of a small top-level body, inlined: the per-request path of chat.
    at = probe.insert_at
    # One %-format of bytes: compiled, a single allocation and copy (``CPyBytes_Build``), where
    # a join makes a tuple and takes a buffer of each part, and chained ``+`` a body-sized
    # temporary per ``+``.
    return b"%s%s%s" % (body[:at], _insertion(rules, mask, probe.needs_comma), body[at:])


def _pairs(rules: DialectRules, mask: int) -> list[bytes]:
    """The pairs to inject (``inject`` of each ``table`` entry whose bit is set in ``mask``)."""
    pairs: list[bytes] = []
    for i, entry in enumerate(rules.table):
        inject = entry[1]
        if mask >> i & 1 and inject is not None:
            pairs.append(inject)
    return pairs


def _insertion(rules: DialectRules, mask: int, comma: bool) -> bytes:
    """The bytes spliced before a top-level body's final ``}``: the pairs of ``mask``
    (``_pairs``), led by a comma if ``comma``; rendered once, then taken from ``insertions``."""
    key = mask << 1 | comma
    cached = rules.insertions.get(key)
    if cached is None:
        cached = rules.insertions[key] = (b"," if comma else b"") + b",".join(_pairs(rules, mask))
    return cached


def _enforce_batch(
    rules: DialectRules, probe: Probe, body: bytes, route: str
) -> RequestBody | SamplingContractViolation:
    """A batch: every element judged and injected into as its own object; a field violated in
    any element is violated once (SPEC §3.3 counts fields, per request)."""
    assert probe.batch is not None
    per_element: list[list[bytes]] = []
    violated: list[FieldRule] = []
    for reading in probe.batch:
        states = reading.states
        values = reading.values
        pairs: list[bytes] = []
        for index, inject, judge, lo, hi, rule in rules.table:
            state = states[index]
            if state == ABSENT:
                if inject is not None:
                    pairs.append(inject)
            elif judge and not (state == NUMBER and lo <= values[index] <= hi) and rule not in violated:
                violated.append(rule)
        per_element.append(pairs)
    if violated or rules.refused:
        violated.sort(key=lambda r: r.index)
        # The message shows the value of the first element that violated the first field.
        shown = (
            next((r for r in probe.batch if _violates(r, violated[0])), probe.batch[0])
            if violated
            else probe.batch[0]
        )
        return _violation(violated, rules.refused, shown, probe.dialect, route)
    if not any(per_element):
        return body
    return splice(probe, body, per_element=per_element)


def _violates(reading: Reading, rule: FieldRule) -> bool:
    state = reading.states[rule.index]
    if state == ABSENT or not rule.judge:
        return False
    return not (state == NUMBER and rule.lo <= reading.values[rule.index] <= rule.hi)


def _violation(
    violated: list[FieldRule], refused: tuple[FieldRule, ...], reading: Reading, dialect: Dialect, route: str
) -> SamplingContractViolation:
    every = sorted((*violated, *refused), key=lambda r: r.index)
    first = every[0]
    if first in refused:
        message = _cannot_carry(first, dialect, route or dialect.name)
    else:
        message = _violation_message(first, reading.states[first.index], reading.values[first.index])
    err = SamplingContractViolation(message, param=first.name)
    err.violated = tuple(r.name for r in every)
    return err


def _restated(raw: msgspec.Raw | None, inner: list[Segment]) -> list[Segment]:
    """An object written again with ``inner`` (rendered pairs) last inside it, or created."""
    if raw is None:
        return [b"{", *inner, b"}"]
    view = memoryview(raw)
    return [view[:-1], b"" if _EMPTY_OBJECT.fullmatch(view) else b",", *inner, b"}"]


def splice(
    probe: Probe,
    body: bytes,
    pairs: list[bytes] | None = None,
    *,
    per_element: list[list[bytes]] | None = None,
    segmented_from: int = SEGMENTED_FROM,
) -> RequestBody:
    """Insert ``pairs`` (rendered ``"key":value``) where the engine will read them last.

    Top-level dialects: before the body's final ``}``. Nested ones: the chain of containers
    is written again as the body's last pair, each with the next one last inside it, the
    innermost with the pairs last inside it (or, for a batch, the list written again with each
    element's ``per_element`` pairs); absent or null containers are created.

    A body of ``segmented_from`` bytes or more comes back as a ``SplicedBody`` whose client
    parts are views of ``body``; the bytes are the same either way.
    """
    at = probe.insert_at
    lead = b"," if probe.needs_comma else b""
    keys = probe.dialect.container
    if not keys:
        assert pairs is not None
        insertion = lead + b",".join(pairs)
        if len(body) < segmented_from:  # the common case, kept to two concatenations
            return body[:at] + insertion + body[at:]
        middle: list[Segment] = [insertion]
    else:
        chain = probe.chain
        if per_element is not None:
            assert probe.batch is not None
            value: list[Segment] = [b"["]
            for i, (reading, element_pairs) in enumerate(zip(probe.batch, per_element, strict=True)):
                if i:
                    value.append(b",")
                if element_pairs:
                    value += _restated(reading.raw, [b",".join(element_pairs)])
                else:
                    assert reading.raw is not None  # a null element always gets pairs
                    value.append(memoryview(reading.raw))
            value.append(b"]")
        else:
            assert pairs is not None
            value = _restated(probe.raw, [b",".join(pairs)])
        for depth in range(len(keys) - 2, -1, -1):  # the containers above the innermost one
            raw = chain[depth] if depth < len(chain) else None
            value = _restated(raw, [_key(keys[depth + 1]), *value])
        middle = [lead, _key(keys[0]), *value]
    if len(body) < segmented_from:
        return b"".join((body[:at], *middle, body[at:]))
    whole = memoryview(body)
    return SplicedBody((whole[:at], *middle, whole[at:]))


def _key(name: str) -> bytes:
    return b'"' + name.encode() + b'":'


def splice_form(probe: Probe, body: bytes, parts: list[bytes], injected: Mapping[str, bytes]) -> RequestBody:
    """Append the form fields (``form.form_part``) after the last part of a multipart body: of a
    repeated field the engine reads the last (SPEC §5.1). Refused unless the parser then reads
    the ``injected`` values last (``form.check_injected``)."""
    assert isinstance(probe, FormProbe)
    at = probe.insert_at
    if at < 0:
        raise BadRequest("cannot locate the end of this multipart/form-data body")
    delimiter = b"\r\n--" + probe.boundary
    insertion = b"".join(delimiter + part for part in parts)
    spliced: RequestBody
    if len(body) < SEGMENTED_FROM:
        spliced = body[:at] + insertion + body[at:]
    else:
        whole = memoryview(body)
        spliced = SplicedBody((whole[:at], insertion, whole[at:]))
    check_injected(probe, body_segments(spliced), dict(injected))
    return spliced
