"""The open streams of one h2 connection side, by stream id (RFC 9113 §5.1.1).

A dict keyed by stream id is what the h2 state of both sides used to be, and compiled
(scripts/build_mypyc.sh) it cost ~260 instructions a lookup once ids pass 256 (each id a new int
object, hashed and compared by value) and ~450 a deletion, a few times per stream on each side.
One side's stream ids only grow, and by 2: the streams open at once mostly have distinct
``id // 2`` modulo a small power of two. So a stream sits in the slot of a ring indexed so, and a
lookup is a list read and an int compare. A stream whose slot is taken by an older one still open
goes to a dict (``_spill``); the ring doubles, up to ``MAX_SLOTS``, when that happens while it is
at least half full (concurrency, not one long stream), so a connection's memory grows with the
streams it actually keeps open. Stream id 0 (the connection) is never a stream: it marks a free
slot.

No library keeps such a table: the h2 package uses a dict too.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

V = TypeVar("V")

FIRST_SLOTS: Final = 8
# 16 KiB of slots at most per connection; beyond 512 streams open at once, the spill dict.
MAX_SLOTS: Final = 1024


class StreamTable(Generic[V]):
    """Stream id -> ``V`` for the streams open on one side of a connection."""

    __slots__ = ("_ids", "_mask", "_spill", "_values", "count")

    _ids: list[int]
    _values: list[V | None]
    _mask: int
    _spill: dict[int, V]

    def __init__(self) -> None:
        self._empty(FIRST_SLOTS)
        self.count = 0  # streams held (read-only outside; ``len()`` too, not on the hot path)

    def __len__(self) -> int:
        return self.count

    def get(self, sid: int) -> V | None:
        i = (sid >> 1) & self._mask
        if self._ids[i] == sid:
            return self._values[i]  # None for sid 0: a free slot's
        if self._spill:
            return self._spill.get(sid)
        return None

    def put(self, sid: int, value: V) -> None:
        """Hold ``value`` as stream ``sid``'s (not held yet, never 0)."""
        i = (sid >> 1) & self._mask
        if self._ids[i] == 0:  # (``_place``, inlined: once per stream, on the hot path)
            self._ids[i] = sid
            self._values[i] = value
        else:
            slots = self._mask + 1
            if self.count >= slots >> 1 and slots < MAX_SLOTS:
                self._grow(slots << 1)
            self._place(sid, value)
        self.count += 1

    def pop(self, sid: int) -> V | None:
        """Stream ``sid``'s value, no longer held; None if it was not."""
        i = (sid >> 1) & self._mask
        if sid != 0 and self._ids[i] == sid:
            value = self._values[i]
            self._ids[i] = 0
            self._values[i] = None
            self.count -= 1
            return value
        spill = self._spill
        if spill:
            found = spill.get(sid)
            if found is not None:
                del spill[sid]
                self.count -= 1
                return found
        return None

    def items(self) -> list[tuple[int, V]]:
        """Every stream held, oldest (lowest id) first."""
        held: list[tuple[int, V]] = []
        if not self.count:  # (an idle connection's timeout check, every sweep)
            return held
        for i, sid in enumerate(self._ids):
            if sid != 0:
                value = self._values[i]
                assert value is not None
                held.append((sid, value))
        held.extend(self._spill.items())
        held.sort(key=_by_id)
        return held

    def values(self) -> list[V]:
        """Every stream's value, oldest first."""
        return [value for _, value in self.items()]

    def take_all(self) -> list[V]:
        """Every stream's value, oldest first; the table is left empty."""
        values = self.values()
        self._empty(FIRST_SLOTS)
        self.count = 0
        return values

    def _empty(self, slots: int) -> None:
        self._ids = [0] * slots
        self._values = [None] * slots
        self._mask = slots - 1
        self._spill = {}

    def _place(self, sid: int, value: V) -> None:
        """Stream ``sid`` in its slot, or in the spill dict if an older stream holds that."""
        i = (sid >> 1) & self._mask
        if self._ids[i] == 0:
            self._ids[i] = sid
            self._values[i] = value
        else:
            self._spill[sid] = value

    def _grow(self, slots: int) -> None:
        held = self.items()
        self._empty(slots)
        for sid, value in held:
            self._place(sid, value)


def _by_id(item: tuple[int, object]) -> int:
    return item[0]
