"""The prefix cache of one simulated rank: SGLang's radix cache at KV-page granularity. Pure.

A prompt is a chain of token blocks (``prompts.prompt_blocks``: each block's id hashes its parent's
id and its own tokens), so a path from the root is a prefix and two prompts share exactly the blocks
of their common prefix. A request that is admitted locks the blocks it found (its cached prefix,
which prefill skips); once prefilled, its prompt's blocks are inserted (locked by it). Blocks nobody
locks stay cached but evictable: they do not count as KV in use (SGLang's ``num_used_tokens`` is
capacity minus available minus evictable) and are evicted leaf first, least recently used first,
when an allocation needs the room.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class _Block:
    __slots__ = ("children", "parent", "refs")

    def __init__(self, parent: int | None) -> None:
        self.parent = parent
        self.refs = 0
        self.children = 0


class PrefixCache:
    """Token blocks by id; ``version`` changes whenever what ``match`` answers may have."""

    __slots__ = ("_blocks", "_leaves", "block_size", "evictable_blocks", "locked_blocks", "version")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._blocks: dict[int, _Block] = {}
        # Unlocked blocks without children, least recently released first: the eviction order.
        self._leaves: OrderedDict[int, None] = OrderedDict()
        self.locked_blocks = 0
        self.evictable_blocks = 0
        self.version = 0

    @property
    def locked_tokens(self) -> int:
        return self.locked_blocks * self.block_size

    @property
    def evictable_tokens(self) -> int:
        return self.evictable_blocks * self.block_size

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, blocks: Sequence[int]) -> int:
        """How many leading blocks of ``blocks`` are cached."""
        cached = self._blocks
        for i, block in enumerate(blocks):
            if block not in cached:
                return i
        return len(blocks)

    def lock(self, blocks: Sequence[int], count: int) -> None:
        """Lock the first ``count`` blocks (all cached, see :meth:`match`)."""
        cached = self._blocks
        for i in range(count):
            self._take(blocks[i], cached[blocks[i]])

    def unlock(self, blocks: Sequence[int], count: int) -> None:
        """Release the first ``count`` blocks, deepest first (so leaves enter the LRU first)."""
        cached = self._blocks
        for i in range(count - 1, -1, -1):
            block = cached[blocks[i]]
            block.refs -= 1
            if block.refs == 0:
                self.locked_blocks -= 1
                self.evictable_blocks += 1
                if block.children == 0:
                    self._leaves[blocks[i]] = None

    def insert(self, blocks: Sequence[int], start: int) -> int:
        """Insert (locked) ``blocks[start:]`` after the caller prefilled them; returns how many of
        them were new. The first ``start`` blocks are the caller's, locked already."""
        cached = self._blocks
        created = 0
        for i in range(start, len(blocks)):
            key = blocks[i]
            block = cached.get(key)
            if block is None:
                parent = blocks[i - 1] if i else None
                block = cached[key] = _Block(parent)
                if parent is not None:
                    parent_block = cached[parent]
                    if parent_block.children == 0:
                        self._leaves.pop(parent, None)
                    parent_block.children += 1
                block.refs = 1
                self.locked_blocks += 1
                created += 1
            else:  # prefilled by another request meanwhile: share it, as SGLang does
                self._take(key, block)
        if created:
            self.version += 1
        return created

    def evict(self, tokens: int) -> int:
        """Evict unlocked blocks until ``tokens`` are free (or none is left); tokens freed."""
        freed = 0
        cached, leaves = self._blocks, self._leaves
        while freed < tokens and leaves:
            key, _ = leaves.popitem(last=False)
            block = cached.pop(key)
            self.evictable_blocks -= 1
            freed += self.block_size
            if block.parent is not None:
                parent = cached[block.parent]
                parent.children -= 1
                if parent.children == 0 and parent.refs == 0:
                    # Older than the child it outlived: next in line.
                    leaves[block.parent] = None
                    leaves.move_to_end(block.parent, last=False)
        if freed:
            self.version += 1
        return freed

    def _take(self, key: int, block: _Block) -> None:
        if block.refs == 0:
            self.locked_blocks += 1
            self.evictable_blocks -= 1
            if block.children == 0:
                self._leaves.pop(key, None)
        block.refs += 1
