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

import re
from dataclasses import dataclass
from typing import Final

from controlplane.contracts.fields import FIELD_BY_NAME
from controlplane.contracts.formatting import format_number
from controlplane.contracts.model import Band, ConflictPolicy, Exact, SamplingContract
from dataplane.errors import SamplingContractViolation
from dataplane.router.body import RequestBody, Segment, SplicedBody
from dataplane.router.contract.probe import ABSENT, NUMBER, Probe

_EMPTY_OBJECT = re.compile(rb"\{[ \t\r\n]*\}")
_SAMPLING_PARAMS_KEY: Final = b'"sampling_params":'
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
    # Judge a present value? False under ``allow`` (pass unchanged, SPEC §3.3).
    judge: bool
    lo: float
    hi: float  # exact values have lo == hi
    exact: bool
    prefix: str  # "<field> violates this deployment's sampling contract: "
    want: str  # exact: the contracted value as printed; band: "between <lo> and <hi>"


@dataclass(frozen=True, slots=True)
class CompiledContract:
    """A contract ready for the hot path, tagged with where it came from."""

    scope: str
    revision: int
    contract: SamplingContract
    rules: tuple[FieldRule, ...]
    # The rules flattened for the hot loop (tuple unpacking beats attribute access).
    table: tuple[tuple[int, bytes | None, bool, float, float, FieldRule], ...]


def _literal(value: float | int, integral: bool) -> bytes:
    # Integral fields are injected as integers (SPEC §3.1); floats as their shortest repr,
    # which json.loads reads back as exactly the same double.
    return str(int(value) if integral else float(value)).encode()


def compile_contract(contract: SamplingContract, *, scope: str, revision: int) -> CompiledContract:
    """Precompute the per-field actions of SPEC §3.3 for one contract snapshot."""
    judge = contract.conflict is ConflictPolicy.REJECT
    rules: list[FieldRule] = []
    for name, spec in contract.params.items():  # §2 order (SamplingContract keeps it)
        field = FIELD_BY_NAME[name]
        key = b'"' + name.encode() + b'":'
        prefix = f"{name} violates this deployment's sampling contract: "
        if isinstance(spec, Exact):
            value = float(spec.value)
            rules.append(
                FieldRule(
                    field.index,
                    name,
                    key + _literal(spec.value, field.integral),
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
            inject = None if spec.default is None else key + _literal(spec.default, field.integral)
            rules.append(
                FieldRule(
                    field.index,
                    name,
                    inject,
                    judge,
                    float(spec.min),
                    float(spec.max),
                    False,
                    prefix,
                    f"between {format_number(spec.min)} and {format_number(spec.max)}",
                )
            )
    table = tuple((r.index, r.inject, r.judge, r.lo, r.hi, r) for r in rules)
    return CompiledContract(scope, revision, contract, tuple(rules), table)


def _violation_message(rule: FieldRule, state: int, value: float) -> str:
    if state == NUMBER:
        got = format_number(value)
        if rule.exact:
            return f"{rule.prefix}got {got}, expected {rule.want} (or omit the field)"
        return f"{rule.prefix}must be {rule.want}, got {got}"
    if rule.exact:
        return f"{rule.prefix}expected {rule.want} (or omit the field), got a non-numeric value"
    return f"{rule.prefix}must be a number {rule.want}, got a non-numeric value"


def enforce(compiled: CompiledContract, probe: Probe, body: bytes) -> RequestBody:
    """Judge and rewrite one probed body (SPEC §3.3); the body to forward, or raise.

    Raises ``SamplingContractViolation`` whose ``param`` is the first violated field in §2
    order and whose ``violated`` lists all of them. Returns ``body`` itself when nothing is
    injected.
    """
    states = probe.states
    values = probe.values
    pairs: list[bytes] = []
    violated: list[FieldRule] = []
    for index, inject, judge, lo, hi, rule in compiled.table:
        state = states[index]
        if state == ABSENT:
            if inject is not None:
                pairs.append(inject)
        elif judge and not (state == NUMBER and lo <= values[index] <= hi):
            # exact: lo == hi, so the test above is float equality (NaN never passes)
            violated.append(rule)
    if violated:
        first = violated[0]
        err = SamplingContractViolation(
            _violation_message(first, states[first.index], values[first.index]), param=first.name
        )
        err.violated = tuple(r.name for r in violated)
        raise err
    if not pairs:
        return body
    return splice(probe, body, pairs)


def splice(
    probe: Probe, body: bytes, pairs: list[bytes], *, segmented_from: int = SEGMENTED_FROM
) -> RequestBody:
    """Insert ``pairs`` (rendered ``"key":value``) where the engine will read them last.

    A body of ``segmented_from`` bytes or more comes back as a ``SplicedBody`` whose client
    parts are views of ``body``; the bytes are the same either way.
    """
    joined = b",".join(pairs)
    at = probe.insert_at
    lead = b"," if probe.needs_comma else b""
    middle: list[Segment]
    if not probe.generate:
        insertion = lead + joined
        if len(body) < segmented_from:  # the common case, kept to two concatenations
            return body[:at] + insertion + body[at:]
        middle = [insertion]
    elif probe.sampling_params is None:  # absent or null: create it
        middle = [lead + _SAMPLING_PARAMS_KEY + b"{" + joined + b"}"]
    else:
        # Re-state the winning sampling_params with our pairs last inside it; placed last in the
        # body, it wins over the client's copy (json.loads: last key wins).
        view = memoryview(probe.sampling_params)
        inner_lead = b"" if _EMPTY_OBJECT.fullmatch(view) else b","
        middle = [b"," + _SAMPLING_PARAMS_KEY, view[:-1], inner_lead + joined + b"}"]
    if len(body) < segmented_from:
        return b"".join((body[:at], *middle, body[at:]))
    whole = memoryview(body)
    return SplicedBody((whole[:at], *middle, whole[at:]))
