"""A request body on its way to a worker: the client's bytes, or those bytes with an injection
spliced in, kept as segments (SPEC §3.3).

Splicing ``,"top_p":0.95`` before the final ``}`` of a 4 MiB body by concatenation copies the
whole body once more: a measured 0.5-0.9 ms, 15-25 % of the probe + enforce cost of such a body
(bench/README.md, "probe"). ``SplicedBody`` keeps zero-copy views of the client's bytes around
the injected bytes instead; the upstream writers send the segments one after the other
(``upstream_h1``) or frame them across segment boundaries (``h2_connection``). The bytes on the
wire are exactly ``bytes(body)``.
"""

from __future__ import annotations

from collections.abc import Sequence

Segment = bytes | memoryview


class SplicedBody:
    """A body as consecutive segments (views of the client's body and the injected bytes)."""

    __slots__ = ("_ends", "segments")

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments: tuple[Segment, ...] = tuple(segments)
        ends: list[int] = []
        end = 0
        for segment in self.segments:
            end += len(segment)
            ends.append(end)
        self._ends = ends  # offset just past each segment

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __bytes__(self) -> bytes:
        return b"".join(self.segments)

    def __repr__(self) -> str:
        return f"<SplicedBody {len(self)}B in {len(self.segments)} segments>"

    def window(self, start: int, stop: int) -> Segment:
        """Bytes ``[start, stop)``: a zero-copy view when they lie in one segment, else a copy of
        only that range (an h2 DATA frame straddling the injection point)."""
        pieces: list[Segment] = []
        begin = 0
        for segment, end in zip(self.segments, self._ends, strict=True):
            if end > start and begin < stop:
                view = memoryview(segment)[max(start - begin, 0) : min(stop, end) - begin]
                pieces.append(view)
            if end >= stop:
                break
            begin = end
        if len(pieces) == 1:
            return pieces[0]
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
