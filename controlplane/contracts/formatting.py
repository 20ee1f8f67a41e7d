"""Numbers as the operator reads them in messages.

SGLang's router prints numbers with Rust's f64 ``{}`` Display (reference A.5): the shortest
digits that read back as the same double, positional (never an exponent), no trailing ``.0``.
Our messages do the same so an operator sees ``0.0000001`` and ``1``, not ``1e-07`` and ``1.0``.
"""

from __future__ import annotations

import math
from decimal import Decimal


def format_number(x: float | int) -> str:
    """Rust ``f64`` Display: 1.0 -> "1", 1e-7 -> "0.0000001", inf -> "inf", nan -> "NaN"."""
    if isinstance(x, bool):  # bool is an int subclass; print it as the number it stands for
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    # repr() gives the shortest round-trip digits; Decimal re-renders them without an exponent.
    text = format(Decimal(repr(x)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
