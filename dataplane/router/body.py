"""A request body on its way to a worker: the client's bytes, or those bytes with an injection
spliced in, kept as segments (SPEC §3.3).

Splicing ``,"top_p":0.95`` before the final ``}`` of a 4 MiB body by concatenation copies the
whole body once more: a measured 0.5-0.9 ms, 15-25 % of the probe + enforce cost of such a body
(bench/README.md, "probe"). ``SplicedBody`` keeps zero-copy views of the client's bytes around
the injected bytes instead; the upstream writers send the segments one after the other
(``upstream.h1.pool``) or cut DATA frames straight from them, across segment boundaries
(``h2c.codec``). The bytes on the wire are exactly ``bytes(body)``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

Segment = bytes | memoryview


class SplicedBody:
    """A body as consecutive segments (views of the client's body and the injected bytes)."""

    __slots__ = ("_ends", "_views", "segments")

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments: tuple[Segment, ...] = tuple(segments)
        self._views = [memoryview(segment) for segment in self.segments]
        self._ends = list(itertools.accumulate(len(segment) for segment in self.segments))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __bytes__(self) -> bytes:
        return b"".join(self.segments)

    def __repr__(self) -> str:
        return f"<SplicedBody {len(self)}B in {len(self.segments)} segments>"

    def window(self, start: int, stop: int) -> Segment:
        """Bytes ``[start, stop)``: a zero-copy view when they lie in one segment, else a copy of
        only that range (an h2 DATA frame straddling the injection point)."""
        ends = self._ends
        i = bisect.bisect_right(ends, start)  # the segment holding byte ``start``
        if i == len(ends):
            return b""
        begin = ends[i - 1] if i else 0
        if stop <= ends[i]:
            return self._views[i][start - begin : stop - begin]
        pieces: list[Segment] = [self._views[i][start - begin :]]
        while ends[i] < stop:
            begin = ends[i]
            i += 1
            pieces.append(self._views[i][: stop - begin])
        return b"".join(pieces)


RequestBody = bytes | SplicedBody


def body_window(body: RequestBody, start: int, stop: int) -> Segment:
    """Bytes ``[start, stop)`` of a body, without copying the client's bytes where possible."""
    if isinstance(body, bytes):
        if start == 0 and stop >= len(body):
            return body
        return memoryview(body)[start:stop]
    return body.window(start, stop)


def body_segments(body: RequestBody) -> tuple[Segment, ...]:
    """The segments to write one after the other."""
    return (body,) if isinstance(body, bytes) else body.segments
