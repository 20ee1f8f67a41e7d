"""How long an answer is when the model stops by itself: the stop distribution of engine-sim. Pure.

``--answer-lengths``: ``max`` (every answer runs to its ``max_tokens``, the default: clients and
tests that count tokens see exactly what they asked for), ``uniform`` (uniform in 1..max_tokens)
or ``geometric:MEAN`` (a stop token follows each token with probability 1/MEAN, as an EOS does;
capped at ``max_tokens``). Seeded per rank (``--seed``), so a run can be replayed.
"""

from __future__ import annotations

import math
import random


class AnswerLengthsError(ValueError):
    """A ``--answer-lengths`` value that is not one of the forms above."""


class AnswerLengths:
    """Draws the length at which each answer stops (``None``: at ``max_tokens``)."""

    __slots__ = ("_log_keep", "_rng", "kind", "mean", "spec")

    def __init__(self, spec: str = "max", seed: int = 0) -> None:
        self.spec = spec
        kind, _, mean_text = spec.partition(":")
        self.kind = kind
        self.mean = 0.0
        if kind in ("max", "uniform") and not mean_text:
            pass
        elif kind == "geometric":
            try:
                self.mean = float(mean_text)
            except ValueError:
                self.mean = -1.0
            if not (math.isfinite(self.mean) and self.mean >= 1.0):
                raise AnswerLengthsError(f"geometric:MEAN needs a mean >= 1 tokens, got {spec!r}")
        else:
            raise AnswerLengthsError(f"must be max, uniform or geometric:MEAN, got {spec!r}")
        self._log_keep = math.log1p(-1.0 / self.mean) if self.mean > 1.0 else -math.inf
        self._rng = random.Random(seed)

    def sample(self, max_new_tokens: int) -> int | None:
        """The answer's own length, or None when it runs to ``max_new_tokens``."""
        if self.kind == "max" or max_new_tokens <= 1:
            return None
        if self.kind == "uniform":
            return self._rng.randint(1, max_new_tokens)
        if self._log_keep == -math.inf:
            return 1
        # Inverse CDF of the geometric distribution on 1, 2, ...: P(L > k) = (1 - 1/mean)^k.
        u = 1.0 - self._rng.random()  # (0, 1]
        return min(max_new_tokens, 1 + int(math.log(u) / self._log_keep))
