"""Worker selection policies (pure): ``round_robin``, ``least_load``, ``power_of_two`` (SPEC §1).

The balancer knows nothing about workers beyond a ``load_of`` function, so it is tested with
plain values. In standalone mode ``load_of`` is the router's own in-flight count per worker;
with a control plane the worker adds the engine's load while that view is FRESH (SPEC §7, see
``workers.Worker.load``). The caller passes only eligible candidates (healthy, serving the
model, not yet tried for this request).

Ties under ``least_load`` rotate, so an idle fleet still spreads sequential requests instead of
sending all of them to the first worker.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Policy(enum.Enum):
    """``--policy`` values."""

    LEAST_LOAD = "least_load"
    POWER_OF_TWO = "power_of_two"
    ROUND_ROBIN = "round_robin"


class Balancer(Generic[T]):
    """Picks one of the candidates under a policy; keeps only a rotation counter as state."""

    __slots__ = ("_counter", "_load_of", "_pick", "_rng", "policy")

    def __init__(
        self, policy: Policy, load_of: Callable[[T], float], *, rng: random.Random | None = None
    ) -> None:
        self.policy = policy
        self._load_of = load_of
        self._rng = rng if rng is not None else random.Random()
        self._counter = 0
        self._pick: Callable[[Sequence[T]], T] = {
            Policy.LEAST_LOAD: self._least_load,
            Policy.POWER_OF_TWO: self._power_of_two,
            Policy.ROUND_ROBIN: self._round_robin,
        }[policy]

    def pick(self, candidates: Sequence[T]) -> T:
        """One of ``candidates`` (which must not be empty)."""
        if len(candidates) == 1:
            return candidates[0]
        return self._pick(candidates)

    def _round_robin(self, candidates: Sequence[T]) -> T:
        self._counter += 1
        return candidates[self._counter % len(candidates)]

    def _least_load(self, candidates: Sequence[T]) -> T:
        # Scan starting at a rotating offset: the first minimum found wins, so equal loads
        # are taken in turn.
        self._counter += 1
        n = len(candidates)
        start = self._counter % n
        load_of = self._load_of
        best = candidates[start]
        best_load = load_of(best)
        for i in range(1, n):
            c = candidates[(start + i) % n]
            load = load_of(c)
            if load < best_load:
                best, best_load = c, load
        return best

    def _power_of_two(self, candidates: Sequence[T]) -> T:
        # Two distinct random candidates, the less loaded wins (ties: the first drawn, which
        # is itself random).
        n = len(candidates)
        a = self._rng.randrange(n)
        b = self._rng.randrange(n - 1)
        if b >= a:
            b += 1
        ca, cb = candidates[a], candidates[b]
        return cb if self._load_of(cb) < self._load_of(ca) else ca
