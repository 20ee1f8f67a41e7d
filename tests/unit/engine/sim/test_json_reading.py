"""engine-sim reads a body exactly as the engine's ``json.loads`` does (SPEC §3.3 safety invariant)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dataplane.engine.sim.app import _json_loads

_json_text = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
).map(lambda v: json.dumps({"k": v, "k2": v}, ensure_ascii=False))


def outcome(loads: Callable[[bytes], Any], body: bytes) -> tuple[str, str]:
    try:
        return "ok", repr(loads(body))
    except Exception as exc:
        return "error", type(exc).__name__


@given(st.binary(max_size=40).map(lambda b: b"{" + b))
def test_same_outcome_as_json_loads_for_any_bytes(body: bytes) -> None:
    """Any body starting with { decodes (or fails) exactly as json.loads would."""
    assert outcome(_json_loads, body) == outcome(json.loads, body)


@given(_json_text, st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"]))
def test_same_value_in_every_encoding_json_accepts(text: str, encoding: str) -> None:
    """UTF-8/16/32 bodies (with or without BOM) read as json.loads reads them."""
    body = text.encode(encoding, "surrogatepass")
    assert outcome(_json_loads, body) == outcome(json.loads, body)


def test_repeated_keys_last_wins() -> None:
    """The last of repeated keys wins, as in the engine."""
    assert _json_loads(b'{"top_p": 0.1, "top_p": "0.9"}') == {"top_p": "0.9"}
