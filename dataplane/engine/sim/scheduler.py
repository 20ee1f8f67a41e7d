"""A simulated scheduler for one dp rank: running batch, waiting queue, KV token pool. Pure.

Time is passed in (``now``), never read, so tests drive it exactly. Each running request
decodes ``decode_tokens_per_s`` tokens per second (per sequence, as a continuous-batching
engine decodes every running request each step); 0 means instant. A request is admitted
when a running slot is free and the pool can hold its prompt plus all tokens it may
generate (reserving up front means the simulation never has to preempt); its KV usage is
prompt plus tokens generated so far, which is what the load publisher reports (SPEC §7).
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class CapacityError(ValueError):
    """A request that could never fit the KV pool, even alone."""


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request's progress; ``on_progress`` is called when tokens were generated or it ends."""

    prompt_tokens: int
    max_new_tokens: int
    n: int = 1
    on_progress: Callable[[SimRequest], None] | None = None
    rid: int = field(default_factory=itertools.count().__next__)
    generated: int = 0
    started_at: float | None = None
    finished: bool = False
    aborted: bool = False

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.n * self.max_new_tokens

    @property
    def used_tokens(self) -> int:
        return self.prompt_tokens + self.n * self.generated


class SimScheduler:
    """Admission, decode progress and load counts of one simulated dp rank."""

    def __init__(
        self, *, max_running_requests: int, max_total_tokens: int, decode_tokens_per_s: float
    ) -> None:
        self.max_running_requests = max_running_requests
        self.max_total_tokens = max_total_tokens
        self.decode_tokens_per_s = decode_tokens_per_s
        self.running: dict[int, SimRequest] = {}
        self.waiting: deque[SimRequest] = deque()
        self._reserved = 0
        self._used = 0

    # -- load (what the publisher sends) -------------------------------------------------
    def counts(self) -> tuple[int, int, int, int]:
        """``(running, waiting, KV tokens in use, KV capacity)`` for ``LoadStat``."""
        return (len(self.running), len(self.waiting), self._used, self.max_total_tokens)

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    # -- requests -----------------------------------------------------------------------
    def submit(self, request: SimRequest, now: float) -> None:
        """Queue ``request``; it may be admitted (and, at rate 0, finished) before this returns.

        Raises :class:`CapacityError` when it could never fit the pool.
        """
        if request.reserved_tokens > self.max_total_tokens:
            raise CapacityError(
                f"The input ({request.prompt_tokens} tokens) plus max new tokens "
                f"({request.n} x {request.max_new_tokens}) is longer than the KV pool "
                f"({self.max_total_tokens} tokens)."
            )
        if (
            self.decode_tokens_per_s <= 0
            and not self.waiting
            and len(self.running) < self.max_running_requests
            and self._reserved + request.reserved_tokens <= self.max_total_tokens
        ):
            # Instant decode with room to spare (the benchmark path): done without queueing.
            request.started_at = now
            request.generated = request.max_new_tokens
            request.finished = True
            return
        self.waiting.append(request)
        self._admit(now)

    def abort(self, request: SimRequest, now: float) -> None:
        """Drop a request whose client went away, freeing its slot and tokens."""
        if request.finished:
            return
        request.aborted = True
        request.finished = True
        if self.running.pop(request.rid, None) is not None:
            self._release(request)
            self._admit(now)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(request)

    def step(self, now: float) -> None:
        """Advance every running request to ``now``; finished ones free room for waiting ones."""
        if not self.running:
            return
        rate = self.decode_tokens_per_s
        done: list[SimRequest] = []
        for request in self.running.values():
            assert request.started_at is not None
            target = min(request.max_new_tokens, int((now - request.started_at) * rate + 1e-9))
            if target > request.generated:
                self._used += request.n * (target - request.generated)
                request.generated = target
                if target == request.max_new_tokens:
                    done.append(request)
                elif request.on_progress is not None:
                    request.on_progress(request)
        for request in done:
            self._finish(request)
        if done:
            self._admit(now)

    def next_event_at(self) -> float | None:
        """When the next token is due (for a loop that sleeps until then), or None when idle."""
        if not self.running or self.decode_tokens_per_s <= 0:
            return None
        rate = self.decode_tokens_per_s
        return min(
            r.started_at + (r.generated + 1) / rate for r in self.running.values() if r.started_at is not None
        )

    # -- internals ----------------------------------------------------------------------
    def _admit(self, now: float) -> None:
        while self.waiting and len(self.running) < self.max_running_requests:
            head = self.waiting[0]
            if self._reserved + head.reserved_tokens > self.max_total_tokens:
                return  # FIFO: the head waits for room, later ones wait behind it
            self.waiting.popleft()
            head.started_at = now
            self._reserved += head.reserved_tokens
            self._used += head.prompt_tokens
            if self.decode_tokens_per_s <= 0 or head.max_new_tokens == 0:
                # Instant decode: generated and finished in the same step it was admitted.
                head.generated = head.max_new_tokens
                self._used += head.n * head.generated
                self._reserved -= head.reserved_tokens
                self._used -= head.used_tokens
                head.finished = True
                if head.on_progress is not None:
                    head.on_progress(head)
                continue
            self.running[head.rid] = head

    def _finish(self, request: SimRequest) -> None:
        del self.running[request.rid]
        self._release(request)
        request.finished = True
        if request.on_progress is not None:
            request.on_progress(request)

    def _release(self, request: SimRequest) -> None:
        self._reserved -= request.reserved_tokens
        self._used -= request.used_tokens
