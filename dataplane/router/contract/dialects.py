"""Where each route keeps the sampling fields, and how the engine reads them there (SPEC §5.1).

Pure data. A ``Dialect`` says, for the routes that speak it:

* ``container``: the keys leading from the body's top level to the object holding the fields
  (``()``: top level; ``("options",)``; ``("parameters", "sampling_params")``), and whether the
  innermost one may also be a list of such objects (a ``/generate`` batch);
* ``typing``: how the engine turns a JSON value into a number there. ``LAX``: the route's
  pydantic request model in lax mode (strings, bools coerced: ``coercion``); ``GATE``: JSON
  numbers only, and JSON integers for the int fields (the ``/generate`` schema gate, and the
  dict-typed containers that hand their values to ``SamplingParams`` untouched: a string there
  is never sampled as a number, a bool is, so neither is read as one); ``FORM``: a multipart
  form field validated as a float (``multipart``);
* ``carried``: the SPEC §2 fields a client can set on the route at all; a contracted exact
  field outside it is a violation naming the route to use instead (``enforce``);
* the routing keys read at the top level (``model``, ``stream`` and the max-token keys, all
  refused when repeated, SPEC §4).

The facts per route come from SGLang 0.5.23's own request models (``reference/sglang-semantics.md``
§G), checked by the tests against the wheel's code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from controlplane.contracts.fields import FIELDS

_ALL: Final = frozenset(f.name for f in FIELDS)


class Typing(enum.Enum):
    """How the engine turns a JSON value into a number where a dialect keeps its fields."""

    LAX = "lax"
    GATE = "gate"
    FORM = "form"


class BatchRule(enum.Enum):
    """When the engine reads a list of sampling objects one per prompt (SGLang 0.5.23,
    ``GenerateReqInput.normalize_batch_and_arguments``). For ONE prompt (and n = 1) it does
    ``dict(sampling_params)``: a list of one two-key object becomes ``{first_key: second_key}``
    and every field falls back to the engine's default, so such a list must be refused."""

    # /generate: the prompt is a batch when ``text`` is a list, else ``input_ids`` a list of
    # lists, else ``input_embeds`` a list of lists of lists (the first non-null one decides).
    SHAPE = "shape"
    # Vertex: ``instances`` always give a list of prompts, unless ``parameters`` carries a
    # prompt key of its own (it is spread into the request after them): then it is refused.
    NO_PROMPT_KEYS = "no prompt keys"


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    container: tuple[str, ...]
    typing: Typing
    carried: frozenset[str]
    # Where a client should send a field this dialect cannot carry (None: no such route).
    instead: str | None = "/v1/chat/completions"
    batch: bool = False  # the innermost container may be a list of objects
    # Batches: which object holds the prompt keys (``text``, ``input_ids``, ``input_embeds``),
    # as a depth along ``container`` (0: the body), and the rule that says a list of sampling
    # objects meets a batch of prompts (``BatchRule``).
    prompt_depth: int = 0
    batch_rule: BatchRule | None = None
    routing: tuple[str, ...] = ("model", "stream")
    index: int = 0  # its place in ``DIALECTS`` (set there): compiled contracts keep one table per dialect
    # ``typing`` as flags, read per request (an enum comparison costs more).
    gate: bool = field(init=False)
    form: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gate", self.typing is Typing.GATE)
        object.__setattr__(self, "form", self.typing is Typing.FORM)


CHAT: Final = Dialect(
    "chat", (), Typing.LAX, _ALL, routing=("model", "stream", "max_tokens", "max_completion_tokens"), index=0
)
# CompletionRequest declares the fields non-Optional (``temperature: float = 1.0``): the engine
# refuses a null the router leaves in place; the router treats it as absent (SPEC §4).
COMPLETIONS: Final = Dialect(
    "completions", (), Typing.LAX, _ALL, routing=("model", "stream", "max_tokens"), index=1
)
GENERATE: Final = Dialect(
    "generate", ("sampling_params",), Typing.GATE, _ALL, batch=True, batch_rule=BatchRule.SHAPE, index=2
)
RESPONSES: Final = Dialect("responses", (), Typing.LAX, _ALL - {"n"}, index=3)
MESSAGES: Final = Dialect(
    "messages",
    (),
    Typing.LAX,
    frozenset({"temperature", "top_p", "top_k"}),
    routing=("model", "stream", "max_tokens"),
    index=4,
)
OLLAMA: Final = Dialect(
    "ollama",
    ("options",),
    Typing.GATE,
    frozenset({"temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty"}),
    index=5,
)
# Vertex predict spreads ``parameters`` into a GenerateReqInput: the fields sit under
# ``parameters.sampling_params``, object or batch list, read by the generate rules. The body
# names no model.
VERTEX: Final = Dialect(
    "vertex",
    ("parameters", "sampling_params"),
    Typing.GATE,
    _ALL,
    instead="/generate",
    batch=True,
    prompt_depth=1,
    batch_rule=BatchRule.NO_PROMPT_KEYS,
    routing=(),
    index=6,
)
TRANSCRIPTION: Final = Dialect(
    "transcription", (), Typing.FORM, frozenset({"temperature"}), instead=None, routing=(), index=7
)

DIALECTS: Final[dict[str, Dialect]] = {
    d.name: d for d in (CHAT, COMPLETIONS, GENERATE, RESPONSES, MESSAGES, OLLAMA, VERTEX, TRANSCRIPTION)
}
assert all(d.index == i for i, d in enumerate(DIALECTS.values()))
