"""Reconnect delays of the control-plane client (pure: the randomness is injected)."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with full jitter, so a fleet of routers does not reconnect in lock step."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng if rng is not None else random.Random()
        self._attempt = 0

    def reset(self) -> None:
        """The connection worked: start over from the initial delay."""
        self._attempt = 0

    def next_delay_s(self) -> float:
        """The next delay: uniform in [ceiling/2, ceiling], the ceiling doubling up to ``max_s``."""
        ceiling = min(self._max_s, self._initial_s * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 32)
        return self._rng.uniform(ceiling / 2, ceiling)
