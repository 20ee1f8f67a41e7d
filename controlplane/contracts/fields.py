"""The eight governed sampling fields of SPEC §2, in their fixed order.

The order is the check order and the injection order (SPEC §2), and ``Field.index`` is the
slot of the field in the router's probe arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Field:
    """One governed field: wire name, slot, engine type (int or float) and contract domain."""

    name: str
    index: int
    # True for the fields the engine types as ``int`` (top_k, n): contracts hold whole numbers
    # for them and inject integer literals (SPEC §3.1).
    integral: bool
    _contains: Callable[[float], bool]
    domain: str

    def contains(self, value: float) -> bool:
        """Positive containment: NaN is never inside a domain (SPEC §3.1)."""
        return self._contains(value)


FIELDS: tuple[Field, ...] = (
    Field("temperature", 0, False, lambda x: 0.0 <= x <= 2.0, "[0, 2]"),
    Field("top_p", 1, False, lambda x: 0.0 < x <= 1.0, "(0, 1]"),
    Field("top_k", 2, True, lambda x: x >= 1.0 or x == -1.0, ">= 1, or exactly -1"),
    Field("min_p", 3, False, lambda x: 0.0 <= x <= 1.0, "[0, 1]"),
    Field("repetition_penalty", 4, False, lambda x: 0.0 < x <= 2.0, "(0, 2]"),
    Field("frequency_penalty", 5, False, lambda x: -2.0 <= x <= 2.0, "[-2, 2]"),
    Field("presence_penalty", 6, False, lambda x: -2.0 <= x <= 2.0, "[-2, 2]"),
    Field("n", 7, True, lambda x: 1.0 <= x <= 128.0, "[1, 128]"),
)

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)

assert all(f.index == i for i, f in enumerate(FIELDS))
