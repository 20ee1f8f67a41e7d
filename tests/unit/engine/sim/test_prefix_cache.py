"""The prefix cache: whole-block prefixes, locks, leaf-first LRU eviction; prompts as block chains."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.engine.sim.prefix_cache import PrefixCache
from dataplane.engine.sim.prompts import prompt_blocks, text_bytes, token_bytes


def test_a_shared_prefix_matches_block_for_block() -> None:
    """Two prompts share exactly the blocks of their common prefix (ids chain their parents)."""
    system = "You are a helpful assistant. " * 8  # 232 bytes: 3 whole blocks of 16 tokens
    a = prompt_blocks((system + "What is 2+2?" * 20).encode(), 16)
    b = prompt_blocks((system + "Name a colour" * 20).encode(), 16)
    assert a[:3] == b[:3] and a[3] != b[3]
    assert prompt_blocks(b"x" * 63, 16) == ()  # partial blocks are never cached
    # The same bytes after a different prefix are a different block.
    assert prompt_blocks(b"y" * 64 + b"z" * 64, 16)[1] != prompt_blocks(b"w" * 64 + b"z" * 64, 16)[1]


def test_token_ids_are_four_bytes_each() -> None:
    """A token-id prompt of 32 ids is two blocks of 16; text and id batches concatenate."""
    assert len(prompt_blocks(token_bytes(range(32)), 16)) == 2
    assert text_bytes(["ab", "cd"]) == b"abcd" and text_bytes([1, 2]) == token_bytes([1, 2])


def test_locked_blocks_are_in_use_and_unlocked_ones_evictable() -> None:
    """Inserted blocks count as locked; unlocking makes them evictable, never lost."""
    cache = PrefixCache(4)
    assert cache.insert((1, 2, 3), 0) == 3 and cache.locked_tokens == 12
    cache.unlock((1, 2, 3), 3)
    assert (cache.locked_tokens, cache.evictable_tokens, cache.match((1, 2, 3, 4))) == (0, 12, 3)


def test_eviction_takes_leaves_least_recently_released_first() -> None:
    """A parent outlives its children; the oldest unlocked leaf goes first; locked blocks stay."""
    cache = PrefixCache(4)
    cache.insert((1, 2), 0)
    cache.unlock((1, 2), 2)  # chain 1 -> 2 released first
    cache.lock((1,), 1)
    cache.insert((1, 3), 1)  # 1 -> 3, holding 1 again
    cache.unlock((1, 3), 2)
    assert cache.evict(4) == 4 and cache.match((1, 2)) == 1  # leaf 2 was the oldest
    assert cache.evict(4) == 4 and cache.match((1, 3)) == 1
    assert cache.evict(100) == 4 and len(cache) == 0
    cache.insert((7,), 0)
    assert cache.evict(100) == 0 and cache.locked_tokens == 4


def test_inserting_a_block_someone_else_prefilled_shares_it() -> None:
    """Two requests prefilling the same prompt end up holding one copy, locked twice."""
    cache = PrefixCache(4)
    assert cache.insert((1, 2), 0) == 2
    assert cache.insert((1, 2), 0) == 0 and cache.locked_tokens == 8
    cache.unlock((1, 2), 2)
    assert cache.locked_tokens == 8 and cache.evict(100) == 0
    cache.unlock((1, 2), 2)
    assert cache.evict(100) == 8


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=5), st.integers(0, 20)), max_size=30
    )
)
def test_accounting_holds_whatever_is_locked_and_evicted(ops: list[tuple[list[int], int]]) -> None:
    """Locked + evictable blocks are exactly the blocks cached, and eviction never frees a locked one."""
    cache = PrefixCache(1)
    held: list[tuple[int, ...]] = []
    for path, evict in ops:
        # A chain id per depth and choice, so paths are prefixes of one tree.
        chain = tuple(hash(tuple(path[: i + 1])) for i in range(len(path)))
        matched = cache.match(chain)
        cache.lock(chain, matched)
        cache.insert(chain, matched)
        held.append(chain)
        if evict % 3 == 0 and held:
            done = held.pop(0)
            cache.unlock(done, len(done))
        cache.evict(evict)
        assert cache.locked_blocks + cache.evictable_blocks == len(cache)
        assert all(cache.match(chain) == len(chain) for chain in held)
    for chain in held:
        cache.unlock(chain, len(chain))
    cache.evict(10_000)
    assert len(cache) == 0
