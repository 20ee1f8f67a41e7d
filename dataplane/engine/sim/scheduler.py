"""A simulated SGLang scheduler for one dp rank: steps, chunked prefill, prefix cache, KV. Pure.

Time is passed in (``now``), never read, so tests drive it exactly. The rank runs one forward
pass (a *step*) at a time, back to back while there is work, as SGLang's event loop does:

- **Prefill first.** When requests can be admitted, the next step is an extend step over their
  uncached prompt tokens (``costs.prefill_s``), at most ``chunked_prefill_size`` tokens per step:
  a longer prompt is chunked over several steps and continues first. Decoding waits meanwhile
  (SGLang's default, no mixed chunks). The step's end is each finished prompt's **first token**.
- **Admission** is first come, first served and limited by running slots and KV: a request is
  admitted when its uncached tokens plus ``new_token_ratio`` × its remaining ``max_new_tokens``
  (clipped at 4096) fit next to what the running requests are estimated to still need
  (``PrefillAdder``). The ratio starts at 0.7 and decays to 0.098 over 600 decode steps
  (``NewTokenRatioTracker``), so the rank over-admits as SGLang does.
- **Decode** steps advance every running sequence by one token (``costs.decode_s`` of the batch
  and its context tokens). When the pool cannot hold the step's new tokens, the youngest request
  (fewest generated tokens, then the longest prompt) is **retracted**: its KV is freed and it
  goes back to the head of the queue, to be prefilled again with what it generated
  (``retract_decode``), and the ratio is re-estimated from the requests that stay.
- **Prefix cache** (``prefix_cache``): a prompt's blocks found cached are skipped by prefill; a
  repeated system prompt costs its prefill once. Unlocked cached blocks are not KV in use and are
  evicted when an allocation needs room.
- An answer ends at ``max_new_tokens`` or at ``stop_at``, the length its request was given (the
  model's stop token, ``lengths``). With zero costs (``StepCosts.instant``) a request is answered
  in full on submit.

The load counts are SGLang 0.5.23's eleven ``LoadStat`` positions (SPEC §7): see :meth:`load_stat`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.prefix_cache import PrefixCache

# SGLang 0.5.23 (environ.py, schedule_policy.py): the admission estimate of future tokens.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096

LoadCounts = tuple[int, int, int, int, int, int, int, int, int]
"""``(running, waiting, KV tokens in use, KV capacity, waiting uncached tokens, total tokens,
max running requests, cumulative prefill uncached tokens, cumulative prefill busy µs)``."""


class CapacityError(ValueError):
    """A request that could never fit the KV pool, even alone."""


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request's progress; ``on_progress`` is called when tokens were generated or it ends."""

    prompt_tokens: int
    max_new_tokens: int
    n: int = 1
    on_progress: Callable[[SimRequest], None] | None = None
    blocks: tuple[int, ...] = ()  # the prompt's full token blocks (prefix cache keys)
    stop_at: int | None = None  # the answer's own length (a stop token), None: max_new_tokens
    rid: int = field(default_factory=itertools.count().__next__)
    generated: int = 0
    started_at: float | None = None  # admitted (its first prefill step began)
    first_token_at: float | None = None
    finished: bool = False
    aborted: bool = False
    retractions: int = 0
    # Scheduler bookkeeping.
    prefill_left: int = 0  # tokens still to prefill (uncached prompt + generated after a retraction)
    locked: int = 0  # leading blocks of ``blocks`` held locked in the cache
    private: int = 0  # KV tokens held outside the cache
    match_version: int = -1  # cache version of ``matched`` (the queue's uncached tokens)
    matched: int = 0

    @property
    def target(self) -> int:
        """The number of tokens this answer ends at."""
        stop = self.stop_at
        return self.max_new_tokens if stop is None else max(0, min(stop, self.max_new_tokens))

    @property
    def seqlen(self) -> int:
        """Tokens of its sequences in KV once prefilled: the prompt plus what was generated."""
        return self.prompt_tokens + self.n * self.generated

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.n * self.max_new_tokens


class SimScheduler:
    """Steps, admission, KV and load counts of one simulated dp rank."""

    def __init__(
        self,
        *,
        max_running_requests: int,
        max_total_tokens: int,
        costs: StepCosts | None = None,
        block_size: int = 16,
    ) -> None:
        self.max_running_requests = max_running_requests
        self.max_total_tokens = max_total_tokens
        self.costs = costs if costs is not None else StepCosts()
        self.cache = PrefixCache(block_size)
        self.running: dict[int, SimRequest] = {}  # admitted: prefilling or decoding
        self.waiting: deque[SimRequest] = deque()
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.total_prefill_uncached_tokens = 0
        self.total_prefill_busy_us = 0
        self.retracted = 0  # requests retracted since start
        self._private = 0  # KV tokens held by requests outside the cache
        self._step_end: float | None = None
        self._step_prefill = False
        self._step_batch: list[tuple[SimRequest, int]] = []  # (request, prefill tokens or 0)

    # -- load (what the publisher sends) -------------------------------------------------
    @property
    def used_tokens(self) -> int:
        return self._private + self.cache.locked_tokens

    def counts(self) -> tuple[int, int, int, int]:
        """``(running, waiting, KV tokens in use, KV capacity)``: LoadStat's first four counts."""
        return (len(self.running), len(self.waiting), self.used_tokens, self.max_total_tokens)

    def load_stat(self) -> LoadCounts:
        """SGLang 0.5.23's LoadStat counts (``SchedulerLoadInquirer.get_loads``): the waiting
        uncached tokens are each queued request's sequence minus its cached prefix, plus what the
        admitted ones still have to prefill; total tokens are KV in use plus every queued token."""
        cache, block = self.cache, self.cache.block_size
        uncached = queued = 0
        for request in self.waiting:
            if request.match_version != cache.version:
                request.matched = cache.match(request.blocks)
                request.match_version = cache.version
            seqlen = request.seqlen
            queued += seqlen
            uncached += max(0, seqlen - request.matched * block)
        for request in self.running.values():
            uncached += request.prefill_left
        used = self.used_tokens
        return (
            len(self.running),
            len(self.waiting),
            used,
            self.max_total_tokens,
            uncached,
            used + queued,
            self.max_running_requests,
            self.total_prefill_uncached_tokens,
            self.total_prefill_busy_us,
        )

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    @property
    def idle(self) -> bool:
        return self._step_end is None and not self.waiting and not self.running

    def next_event_at(self) -> float | None:
        """When the step in flight ends (for a loop that sleeps until then), or None."""
        return self._step_end

    # -- requests -----------------------------------------------------------------------
    def submit(self, request: SimRequest, now: float) -> None:
        """Queue ``request``; an idle rank starts a step for it at once. With instant costs it is
        answered in full before this returns. Raises :class:`CapacityError` when it could never
        fit the pool."""
        if request.reserved_tokens > self.max_total_tokens:
            raise CapacityError(
                f"The input ({request.prompt_tokens} tokens) plus max new tokens "
                f"({request.n} x {request.max_new_tokens}) is longer than the KV pool "
                f"({self.max_total_tokens} tokens)."
            )
        if self.costs.is_instant or request.target == 0:
            request.started_at = request.first_token_at = now
            request.generated = request.target
            request.finished = True
            return
        self.waiting.append(request)
        if self._step_end is None:
            self._schedule(now)

    def abort(self, request: SimRequest, now: float) -> None:
        """Drop a request whose client went away, freeing its slot and tokens."""
        if request.finished:
            return
        request.aborted = True
        request.finished = True
        if self.running.pop(request.rid, None) is not None:
            self._release(request)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(request)
        if self._step_end is None:
            self._schedule(now)

    def advance(self, now: float) -> tuple[int, int]:
        """Run every step that ends by ``now`` (each next one starting where the last ended);
        returns ``(prefill steps, decode steps)`` completed, for the publisher's cadence."""
        prefills = decodes = 0
        end = self._step_end
        while end is not None and end <= now:
            if self._step_prefill:
                self._end_prefill(end)
                prefills += 1
            else:
                self._end_decode(end)
                decodes += 1
            self._step_end = None
            self._schedule(end)
            end = self._step_end
        if not self.running and not self.waiting:
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO  # on_idle: new_token_ratio_tracker.reset()
        return prefills, decodes

    # -- steps --------------------------------------------------------------------------
    def _schedule(self, now: float) -> None:
        batch = self._build_prefill(now)
        if batch:
            tokens = sum(t for _, t in batch)
            duration = self.costs.prefill_s(tokens)
            self.total_prefill_uncached_tokens += tokens
            self.total_prefill_busy_us += round(duration * 1e6)
            self._start(now, duration, True, batch)
            return
        decoding = [r for r in self.running.values() if r.prefill_left == 0]
        if not decoding:
            return
        need = sum(r.n for r in decoding)
        if self._make_room(need):
            self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
        else:
            self._retract()
            decoding = [r for r in self.running.values() if r.prefill_left == 0]
            if not decoding:
                self._schedule(now)  # only prefills were kept: they go first
                return
            need = sum(r.n for r in decoding)
        kv = 0
        for request in decoding:
            kv += request.seqlen
            request.private += request.n  # the slots of the tokens this step writes
        self._private += need
        self._start(now, self.costs.decode_s(need, kv), False, [(r, 0) for r in decoding])

    def _start(self, now: float, duration: float, prefill: bool, batch: list[tuple[SimRequest, int]]) -> None:
        self._step_end = now + duration
        self._step_prefill = prefill
        self._step_batch = batch

    def _build_prefill(self, now: float) -> list[tuple[SimRequest, int]]:
        """This step's extend batch: a chunked prefill continues first, then admissions
        (PrefillAdder), within ``chunked_prefill_size`` tokens."""
        budget = self.costs.chunked_prefill_size
        batch: list[tuple[SimRequest, int]] = []
        for request in self.running.values():
            if request.prefill_left and budget > 0:
                chunk = min(request.prefill_left, budget)
                if not self._make_room(chunk):
                    return batch
                self._allocate(request, chunk)
                request.prefill_left -= chunk
                batch.append((request, chunk))
                budget -= chunk
        if budget <= 0 or not self.waiting:
            return batch
        ratio = self.new_token_ratio
        # What the admitted requests are estimated to still need (_get_running_request_total_token_offset).
        reserved = sum(
            min(r.max_new_tokens - r.generated, CLIP_MAX_NEW_TOKENS) * r.n * ratio + r.prefill_left
            for r in self.running.values()
        )
        cache = self.cache
        while self.waiting and budget > 0 and len(self.running) < self.max_running_requests:
            head = self.waiting[0]
            matched = cache.match(head.blocks)
            cache.lock(head.blocks, matched)
            # At least the last token is computed: its logits give the next token.
            extend = max(1, head.seqlen - matched * cache.block_size)
            future = min(head.max_new_tokens - head.generated, CLIP_MAX_NEW_TOKENS) * head.n * ratio
            if self.running and self.used_tokens + reserved + extend + future > self.max_total_tokens:
                cache.unlock(head.blocks, matched)
                break  # FIFO: the head waits for room, later ones wait behind it
            self.waiting.popleft()
            head.locked = matched
            if head.started_at is None:
                head.started_at = now
            self.running[head.rid] = head
            chunk = min(extend, budget)
            self._make_room(chunk)
            self._allocate(head, chunk)
            head.prefill_left = extend - chunk
            reserved += head.prefill_left + future
            batch.append((head, chunk))
            budget -= chunk
        return batch

    def _end_prefill(self, end: float) -> None:
        for request, _chunk in self._step_batch:
            if request.finished or request.prefill_left:  # aborted, or more chunks to go
                continue
            # SGLang caches the prefilled prompt (cache_unfinished_req): its blocks become shared.
            blocks = request.blocks
            if len(blocks) > request.locked:
                self.cache.insert(blocks, request.locked)
                moved = (len(blocks) - request.locked) * self.cache.block_size
                request.private -= moved
                self._private -= moved
                request.locked = len(blocks)
            # The extend samples the next token: the first one, or the next after a retraction.
            request.generated += 1
            request.private += request.n
            self._private += request.n
            if request.first_token_at is None:
                request.first_token_at = end
            self._progress(request)
        self._step_batch = []

    def _end_decode(self, _end: float) -> None:
        for request, _ in self._step_batch:
            if request.finished:
                continue
            request.generated += 1
            self._progress(request)
        self._step_batch = []

    def _progress(self, request: SimRequest) -> None:
        if request.generated >= request.target:
            del self.running[request.rid]
            self._release(request)
            request.finished = True
        if request.on_progress is not None:
            request.on_progress(request)

    # -- KV -------------------------------------------------------------------------------
    def _make_room(self, tokens: int) -> bool:
        """True when ``tokens`` more fit the pool, evicting unlocked cached blocks if needed."""
        free = self.max_total_tokens - self.used_tokens - self.cache.evictable_tokens
        if free < tokens:
            free += self.cache.evict(tokens - free)
        return free >= tokens

    def _allocate(self, request: SimRequest, tokens: int) -> None:
        request.private += tokens
        self._private += tokens

    def _release(self, request: SimRequest) -> None:
        self._private -= request.private
        request.private = 0
        self.cache.unlock(request.blocks, request.locked)
        request.locked = 0
        request.prefill_left = 0

    def _retract(self) -> None:
        """retract_decode: drop the youngest (fewest generated tokens, then the longest prompt)
        until the step's tokens fit; one request always stays."""
        keep = sorted(
            self.running.values(), key=lambda r: (r.generated, -r.prompt_tokens, -r.rid), reverse=True
        )
        retracted: list[SimRequest] = []
        while len(keep) > 1 and not self._make_room(sum(r.n for r in keep if r.prefill_left == 0)):
            request = keep.pop()
            del self.running[request.rid]
            self._release(request)
            request.retractions += 1
            request.match_version = -1
            retracted.append(request)
        # Back to the head of the queue, oldest first (they arrived before anything queued).
        retracted.sort(key=lambda r: r.rid, reverse=True)
        self.waiting.extendleft(retracted)
        self.retracted += len(retracted)
        decoded = sum(r.generated for r in keep)
        budget = sum(r.max_new_tokens for r in keep)
        # NewTokenRatioTracker.estimate_new_token_ratio_after_retract
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep)) / (budget + 1))
