"""A bounded in-memory history of the fleet's rejection totals, for rates (SPEC §8). Pure: no I/O.

The totals (``RejectionLedger.totals().by_field``) are cumulative over every router and boot; a
rate is the growth of those totals over time. ``record`` keeps one sample per ``every_s`` for the
last ``keep_s`` (an hour and a minute by default: 367 samples of at most eight fields), so the
status page can say how many rejections the last minute saw and draw each of the last sixty
minutes. The history starts when the control plane starts: minutes before the first sample are
unknown (None), not zero.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Rejections by field in the minute ending at ``end_unix_s`` (None: no sample that old)."""

    end_unix_s: float
    by_field: Mapping[str, int] | None


class RejectionHistory:
    """Samples of cumulative totals by field, one per ``every_s``, for the last ``keep_s``."""

    def __init__(self, every_s: float = 10.0, keep_s: float = 61 * MINUTE_S) -> None:
        self._every_s = every_s
        self._keep_s = keep_s
        self._samples: deque[tuple[float, dict[str, int]]] = deque()

    def record(self, now_unix_s: float, by_field: Mapping[str, int]) -> None:
        """Take the totals now. Samples stay ``every_s`` apart, except the newest, which a sample
        taken sooner replaces (so the newest is always now, and the count stays bounded)."""
        sample = (now_unix_s, dict(by_field))
        # The newest sample is kept for good once it is every_s after the one before it.
        if len(self._samples) >= 2 and self._samples[-1][0] - self._samples[-2][0] < self._every_s:
            self._samples[-1] = sample
        else:
            self._samples.append(sample)
        while self._samples and now_unix_s - self._samples[0][0] > self._keep_s:
            self._samples.popleft()

    def _at(self, unix_s: float) -> dict[str, int] | None:
        """The newest sample taken at or before ``unix_s``; None when the history is younger."""
        found = None
        for taken, totals in self._samples:
            if taken > unix_s:
                break
            found = totals
        return found

    def growth(self, since_unix_s: float, until_unix_s: float) -> dict[str, int] | None:
        """Rejections by field between two times (None when ``since`` is before the first sample)."""
        start, end = self._at(since_unix_s), self._at(until_unix_s)
        if start is None or end is None:
            return None
        # Totals only grow; a lower value (a store merge that replaced a boot's count) is not a
        # negative number of rejections.
        return {
            field: max(0, n - start.get(field, 0)) for field, n in end.items() if n - start.get(field, 0) > 0
        }

    def per_minute(self, now_unix_s: float, minutes: int = 60) -> list[MinuteCounts]:
        """The last ``minutes`` minutes by the clock, oldest first, each with its rejections by
        field; the last is the minute under way, so far (since the first sample, if that is later:
        a control plane that just started shows what it has seen)."""
        this_minute = now_unix_s - now_unix_s % MINUTE_S
        # The whole minutes before this one, the newest ending where this one starts.
        ends = [this_minute - MINUTE_S * (minutes - 2 - i) for i in range(minutes - 1)]
        whole = [MinuteCounts(end, self.growth(end - MINUTE_S, end)) for end in ends]
        first = self._samples[0][0] if self._samples else now_unix_s
        return [*whole, MinuteCounts(now_unix_s, self.growth(max(this_minute, first), now_unix_s))]

    def last_minute(self, now_unix_s: float) -> int | None:
        """Rejections in the last 60 s (None while the history is younger than that)."""
        growth = self.growth(now_unix_s - MINUTE_S, now_unix_s)
        return None if growth is None else sum(growth.values())
