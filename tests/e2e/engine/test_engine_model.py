"""engine-sim as a faithful engine, seen from a client: queueing shows as time to first chunk, a
repeated system prompt is prefilled once, answers stop below max_tokens."""

from __future__ import annotations

import threading
import time
from typing import Any

import openai
import pytest

from tests.fakes.sim_process import Sim

MODEL = "sim-model"
pytestmark = pytest.mark.timeout(60)


def client(sim: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0, timeout=30)


def first_chunk_after(sim: Sim, messages: list[dict[str, str]], max_tokens: int = 3) -> tuple[float, float]:
    """(seconds from sending a streamed chat to its first chunk, the monotonic time it arrived)."""
    c = client(sim)
    try:
        sent = time.monotonic()
        stream = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, stream=True)
        first = 0.0
        for _chunk in stream:
            first = first or time.monotonic()
        assert first
        return first - sent, first
    finally:
        c.close()


def test_a_busy_engines_queueing_is_visible_as_time_to_first_chunk() -> None:
    """One running slot busy for about a second: a streamed chat's first chunk (the role) comes only
    once it is admitted, after the busy answer ends; on the idle engine it comes at once."""
    with Sim("--max-running-requests", "1", "--decode-tokens-per-s", "20") as sim:
        idle_wait, _ = first_chunk_after(sim, [{"role": "user", "content": "hi"}])
        done: dict[str, Any] = {}

        def busy() -> None:
            c = client(sim)
            try:
                c.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=20
                )
                done["at"] = time.monotonic()
            finally:
                c.close()

        thread = threading.Thread(target=busy)
        thread.start()
        time.sleep(0.2)  # the busy request holds the slot
        queued_wait, first_at = first_chunk_after(sim, [{"role": "user", "content": "hello"}])
        thread.join(30)
    assert idle_wait < 0.5
    assert "at" in done and first_at >= done["at"] - 0.06  # not before the slot was free
    assert queued_wait > 0.6  # ~0.85 s left of the busy answer


def test_a_repeated_system_prompt_is_prefilled_once() -> None:
    """2000 system-prompt tokens at 0.5 ms each: the first request waits ~1 s for its first chunk,
    the next one with the same system prompt only for its own question (the prefix cache)."""
    with Sim("--step-base-ms", "2", "--prefill-per-token-us", "500") as sim:
        system = {"role": "system", "content": "You are a terse assistant. " * 296}  # ~8 KB, 2000 tokens
        cold, _ = first_chunk_after(sim, [system, {"role": "user", "content": "Name a colour."}])
        warm, _ = first_chunk_after(sim, [system, {"role": "user", "content": "Name a fruit, please."}])
    assert cold > 0.9
    assert warm < 0.3


def test_answers_stop_below_max_tokens() -> None:
    """--answer-lengths uniform: answers of 1..max_tokens tokens; finish_reason "stop" below the cap,
    "length" at it."""
    with Sim("--answer-lengths", "uniform", "--decode-tokens-per-s", "0") as sim:
        c = client(sim)
        try:
            replies = [
                c.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
                )
                for _ in range(40)
            ]
        finally:
            c.close()
    seen = {(r.usage.completion_tokens if r.usage else -1, r.choices[0].finish_reason) for r in replies}
    assert {n for n, _ in seen} > {1, 8} and all(1 <= n <= 8 for n, _ in seen)
    assert all(reason == ("length" if n == 8 else "stop") for n, reason in seen)
