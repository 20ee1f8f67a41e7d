"""Admission: bounded slots, bounded FIFO queue, timeouts, cancellation (SPEC §1 --max-concurrency, --queue-size, --queue-timeout-s; §5)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.errors import QueueTimeout, ServiceOverloaded
from dataplane.router.admission import Admission, Slot


async def test_free_slot_is_taken_synchronously() -> None:
    """With a free slot, try_acquire succeeds at once and counts the slot in use."""
    adm = Admission(2, 0, 1.0)
    a = adm.try_acquire()
    b = adm.try_acquire()
    assert a is not None and b is not None
    assert adm.in_use == 2
    assert adm.try_acquire() is None


async def test_full_queue_is_service_overloaded() -> None:
    """With every slot taken and the queue full, acquire raises ServiceOverloaded (429)."""
    adm = Admission(1, 1, 5.0)
    held = await adm.acquire()
    waiter = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0)
    assert adm.queue_depth == 1
    with pytest.raises(ServiceOverloaded):
        await adm.acquire()
    held.release()
    slot = await waiter
    assert adm.in_use == 1 and adm.queue_depth == 0
    slot.release()
    assert adm.in_use == 0


async def test_zero_queue_refuses_at_once() -> None:
    """queue_size 0 means no waiting: a request beyond the slots is refused immediately."""
    adm = Admission(1, 0, 5.0)
    _held = await adm.acquire()
    with pytest.raises(ServiceOverloaded):
        await adm.acquire()


async def test_queue_timeout() -> None:
    """A waiter that gets no slot within queue_timeout_s raises QueueTimeout and leaves the queue."""
    adm = Admission(1, 4, 0.05)
    _held = await adm.acquire()
    with pytest.raises(QueueTimeout):
        await adm.acquire()
    assert adm.queue_depth == 0
    assert adm.in_use == 1


async def test_fifo_order() -> None:
    """Waiters get slots in arrival order."""
    adm = Admission(1, 10, 5.0)
    held = await adm.acquire()
    order: list[int] = []

    async def wait(i: int) -> None:
        slot = await adm.acquire()
        order.append(i)
        await asyncio.sleep(0)
        slot.release()

    tasks = [asyncio.create_task(wait(i)) for i in range(5)]
    await asyncio.sleep(0)
    held.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert adm.in_use == 0


async def test_newcomer_cannot_overtake_a_waiter() -> None:
    """A released slot goes to the queued waiter even if a newcomer asks before it resumes."""
    adm = Admission(1, 10, 5.0)
    held = await adm.acquire()
    waiter = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0)
    held.release()
    assert adm.try_acquire() is None
    (await waiter).release()


async def test_cancelled_waiter_leaves_the_queue() -> None:
    """A waiter cancelled (client gone) leaves the queue and never takes a slot."""
    adm = Admission(1, 10, 5.0)
    held = await adm.acquire()
    gone = asyncio.create_task(adm.acquire())
    stays = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0)
    assert adm.queue_depth == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert adm.queue_depth == 1
    held.release()
    (await stays).release()
    assert adm.in_use == 0 and adm.queue_depth == 0


async def test_slot_handed_over_then_cancelled_is_passed_on() -> None:
    """A waiter cancelled in the instant it was handed a slot passes the slot on (no leak)."""
    adm = Admission(1, 10, 5.0)
    held = await adm.acquire()
    first = asyncio.create_task(adm.acquire())
    second = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0)
    held.release()  # hands the slot to `first` ...
    first.cancel()  # ... which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await first
    (await second).release()
    assert adm.in_use == 0


async def test_release_is_idempotent() -> None:
    """Releasing a slot twice frees it once."""
    adm = Admission(2, 0, 1.0)
    slot = await adm.acquire()
    _other = await adm.acquire()
    slot.release()
    slot.release()
    assert adm.in_use == 1
    with Slot(adm) as _:
        pass


@settings(max_examples=50, deadline=None)
@given(
    ops=st.lists(st.sampled_from(["acquire", "release", "cancel", "tick"]), max_size=60),
    slots=st.integers(1, 3),
    queue=st.integers(0, 3),
)
def test_no_slot_leaks_under_any_interleaving(ops: list[str], slots: int, queue: int) -> None:
    """Whatever the interleaving of acquires, releases and cancels, slots balance out at the end."""

    async def scenario() -> None:
        adm = Admission(slots, queue, 10.0)
        held: list[Slot] = []
        pending: list[asyncio.Task[Slot]] = []
        for op in ops:
            if op == "acquire":
                pending.append(asyncio.create_task(adm.acquire()))
            elif op == "release" and held:
                held.pop(0).release()
            elif op == "cancel" and pending:
                pending.pop(0).cancel()
            await asyncio.sleep(0)
            for t in [t for t in pending if t.done()]:
                pending.remove(t)
                if not t.cancelled() and t.exception() is None:
                    held.append(t.result())
            assert adm.in_use <= slots and adm.queue_depth <= queue
        for t in pending:
            t.cancel()
        results = await asyncio.gather(*pending, return_exceptions=True)
        held.extend(r for r in results if isinstance(r, Slot))
        for s in held:
            s.release()
        assert adm.in_use == 0 and adm.queue_depth == 0

    asyncio.run(scenario())
