"""Worker selection policies (pure): ``least_load``, ``power_of_two``, ``least_request``,
``round_robin`` (SPEC §1), and the predicted-wait score they rank workers by.

The balancer knows nothing about workers beyond their two scores (``Scored``), so it is tested
with plain values: ``wait`` (``least_load``, ``power_of_two``: the predicted wait below) and
``load`` (``least_request``: requests, the engine's FRESH count plus the router's own change since
that view, or its own in-flight count; ``workers.Worker.load``). The caller passes only eligible
candidates (healthy, serving the model, not yet tried for this request). Ties rotate, so an idle
fleet still spreads sequential requests instead of sending all of them to the first worker.

**Predicted wait** (``workers.Worker.wait``): the expected time until a new request sent to a
worker now would start, in seconds, from a FRESH view of SGLang 0.5.23's full LoadStat (SPEC §7)
and the router's own work since that view:

- *slots*: the requests ahead are the engine's running + waiting ones that are not the router's
  own (each counted as one mean request) plus the router's own in flight, each weighted by its
  work (``max_tokens`` plus its prompt, relative to the mean): signed, so the router's own
  completions since the view count as much as its sends. Past the free slots
  (``max_running_requests``), each extra request-equivalent waits a mean service time divided
  by the slots;
- *queued prefill*: ``num_waiting_uncached_tokens`` plus the prompts the router sent since the
  view, at the prefill rate measured from the deltas of the two cumulative prefill counters;
- *KV pressure*: ``num_total_tokens`` (in use plus queued) plus those prompts beyond the KV
  capacity must drain first, a mean service time per capacity's worth.

A worker without such a view (stale, missing, or a six-position engine) is scored from the
router's own work alone, as ``least_request`` does. :class:`WaitTerms` is computed once per view;
scoring a request is a few multiplications per worker, without allocation.
"""

from __future__ import annotations

import enum
import random
from typing import Final, Generic, Protocol, TypeVar, final

from mypy_extensions import mypyc_attr

# A decode step of an 8B model on one H100 is 7-12 ms (engine-sim's costs.py): the seconds one
# token of one sequence's answer takes. It only sets the exchange rate between prefill seconds
# and decode work; a request's service time is its work in such tokens.
DECODE_TOKEN_S: Final = 0.01
# A prompt token's share of a request's work, in decode tokens: ~30 µs of prefill per token
# against a 10 ms decode step (engine-sim's calibration).
PROMPT_TOKEN_WORK: Final = 0.003
# The work of a request that sets no max_tokens: SGLang's default max_new_tokens.
DEFAULT_MAX_TOKENS: Final = 128
# Below the slot limit each request-equivalent ahead still costs this share of a slot's wait: a
# view is up to a push interval old and other routers send too, so free slots seen now may be
# gone when the request arrives, and a smaller batch decodes faster. In bench/routing_quality.py's
# model 0.25 kept two routers closer to the shortest-queue oracle than 0.001 (free slots as free)
# did, at the same mixed-lengths p99.
FREE_SLOT_WEIGHT: Final = 0.25


class Policy(enum.Enum):
    """``--policy`` values."""

    LEAST_LOAD = "least_load"
    LEAST_REQUEST = "least_request"
    POWER_OF_TWO = "power_of_two"
    ROUND_ROBIN = "round_robin"


# A request's work is held by its worker as one integer, ``max_tokens << WORK_SHIFT`` plus its
# prompt tokens, so that the request path adds and subtracts a single number per request and
# the in-flight sums of both stay apart (prompts in flight < 2**32 tokens).
WORK_SHIFT: Final = 32
PROMPT_MASK: Final = (1 << WORK_SHIFT) - 1


def request_work(max_tokens: int | None, prompt_tokens: int) -> int:
    """A request's work as its worker holds it: its answer's cap and its prompt, packed."""
    return ((DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens) << WORK_SHIFT) + prompt_tokens


def held_work(held: int) -> tuple[float, int]:
    """``(work in decode tokens, prompt tokens)`` of a worker's packed in-flight work."""
    prompts = held & PROMPT_MASK
    return (held >> WORK_SHIFT) + prompts * PROMPT_TOKEN_WORK, prompts


class EngineView(Protocol):
    """A FRESH engine view as the router keeps it (``control.EngineLoad``)."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def waiting_uncached_tokens(self) -> int | None: ...
    @property
    def total_tokens(self) -> int | None: ...
    @property
    def max_running(self) -> int | None: ...
    @property
    def prefill_tokens_per_s(self) -> float | None: ...


@final
class WaitTerms:
    """The per-view constants of one worker's predicted wait (see the module docstring).

    Read-only (``Final``). Not a frozen dataclass: compiled, its generated ``__init__`` stays
    interpreted and sets each field through ``object.__setattr__`` (~15k instructions a view,
    every worker again at every load message: 1.8 ms a message at 1,000 workers).
    """

    __slots__ = (
        "excess",
        "inv_mean_work",
        "kv_excess",
        "kv_token_s",
        "prefill_s",
        "prompt_token_s",
        "slot_s",
        "tie_s",
    )

    def __init__(
        self,
        excess: float,
        slot_s: float,
        inv_mean_work: float,
        prefill_s: float,
        prompt_token_s: float,
        kv_excess: float,
        kv_token_s: float,
        tie_s: float,
    ) -> None:
        # request-equivalents ahead past the free slots, before the router's own work
        self.excess: Final = excess
        # seconds per request-equivalent past the free slots
        self.slot_s: Final = slot_s
        # 1 / a mean request's work
        self.inv_mean_work: Final = inv_mean_work
        # the queued prefill at the view, seconds
        self.prefill_s: Final = prefill_s
        # 1 / prefill rate (0: unknown)
        self.prompt_token_s: Final = prompt_token_s
        # tokens in use and queued beyond capacity (negative: room left)
        self.kv_excess: Final = kv_excess
        # seconds per token beyond capacity
        self.kv_token_s: Final = kv_token_s
        # seconds per request-equivalent below the slot limit (FREE_SLOT_WEIGHT)
        self.tie_s: Final = tie_s


def wait_terms(view: EngineView | None, *, own_inflight: int, mean_work: float, slots: int) -> WaitTerms:
    """The constants for one view; ``view`` None (or without the appended counts): the router's
    own work only, ``slots`` being the last limit known (1 when never known)."""
    mean_service_s = mean_work * DECODE_TOKEN_S
    inv_mean = 1.0 / mean_work
    limit = view.max_running if view is not None else None
    if view is None or limit is None or limit <= 0 or view.waiting_uncached_tokens is None:
        slot_s = mean_service_s / slots
        return WaitTerms(1.0 - slots, slot_s, inv_mean, 0.0, 0.0, -1.0, 0.0, slot_s * FREE_SLOT_WEIGHT)
    foreign = max(0, view.running + view.waiting - own_inflight)
    rate = view.prefill_tokens_per_s
    token_s = 1.0 / rate if rate else 0.0
    total = view.total_tokens if view.total_tokens is not None else 0
    capacity = view.capacity
    return WaitTerms(
        excess=foreign - limit + 1.0,
        slot_s=mean_service_s / limit,
        inv_mean_work=inv_mean,
        prefill_s=view.waiting_uncached_tokens * token_s,
        prompt_token_s=token_s,
        kv_excess=float(total - capacity) if capacity > 0 else -1.0,
        kv_token_s=mean_service_s / capacity if capacity > 0 else 0.0,
        tie_s=mean_service_s / limit * FREE_SLOT_WEIGHT,
    )


def predicted_wait(terms: WaitTerms, own_work: float, own_prompts_since_view: int) -> float:
    """Seconds until a new request would start: past the free slots, queued prefill, KV pressure."""
    ahead = terms.excess + own_work * terms.inv_mean_work
    wait = terms.prefill_s + own_prompts_since_view * terms.prompt_token_s + ahead * terms.tie_s
    if ahead > 0.0:
        wait += ahead * terms.slot_s
    kv = terms.kv_excess + own_prompts_since_view
    if kv > 0.0:
        wait += kv * terms.kv_token_s
    return wait


# Test candidates are interpreted subclasses (compiled, the balancer's calls stay vtable calls).
@mypyc_attr(allow_interpreted_subclasses=True)
class Scored:
    """A candidate as the balancer ranks it, by one of two scores (``fleet.workers.Worker``
    extends it; the tests rank plain values).

    A base class rather than two score functions: compiled (scripts/build_mypyc.sh), a function
    held in an attribute is a generic call per candidate per request; these are vtable calls.
    """

    __slots__ = ()

    def load(self) -> float:
        """``least_request``'s score."""
        raise NotImplementedError

    def wait(self) -> float:
        """``least_load``'s and ``power_of_two``'s score (the predicted wait); ``load`` unless
        a candidate has its own."""
        return self.load()


T = TypeVar("T", bound=Scored)


class Balancer(Generic[T]):
    """Picks one of the candidates under a policy; keeps only a rotation counter as state."""

    __slots__ = ("_by_wait", "_counter", "_rng", "_round_robin", "_two", "policy")

    def __init__(self, policy: Policy, *, rng: random.Random | None = None) -> None:
        self.policy = policy
        # least_request scores requests; least_load and power_of_two the predicted wait.
        self._by_wait = policy in (Policy.LEAST_LOAD, Policy.POWER_OF_TWO)
        self._round_robin = policy is Policy.ROUND_ROBIN
        self._two = policy is Policy.POWER_OF_TWO
        self._rng = rng if rng is not None else random.Random()
        self._counter = 0

    def pick(self, candidates: list[T]) -> T:
        """One of ``candidates`` (which must not be empty)."""
        n = len(candidates)
        if n == 1:
            return candidates[0]
        if self._round_robin:
            self._counter += 1
            return candidates[self._counter % n]
        if self._two:
            return self._power_of_two(candidates)
        # Scan starting at a rotating offset: the first minimum found wins, so equal loads
        # are taken in turn.
        self._counter += 1
        start = self._counter % n
        by_wait = self._by_wait
        best = candidates[start]
        best_score = best.wait() if by_wait else best.load()
        for i in range(1, n):
            c = candidates[(start + i) % n]
            score = c.wait() if by_wait else c.load()
            if score < best_score:
                best, best_score = c, score
        return best

    def _power_of_two(self, candidates: list[T]) -> T:
        # Two distinct random candidates, the less loaded wins (ties: the first drawn, which
        # is itself random).
        n = len(candidates)
        a = self._rng.randrange(n)
        b = self._rng.randrange(n - 1)
        if b >= a:
            b += 1
        ca, cb = candidates[a], candidates[b]
        return cb if cb.wait() < ca.wait() else ca
