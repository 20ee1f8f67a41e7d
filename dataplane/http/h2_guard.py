"""What a client's h2 byte stream is checked for before the codec parses it: frame sizes and floods.

A codec reads a whole frame before it acts on it (python-h2, used here before, compared its
length with SETTINGS_MAX_FRAME_SIZE only then, so a frame header announcing 2^24-1 bytes made it
buffer 16 MiB per connection). ``FrameGuard`` reads each 9-byte frame header (RFC 9113 §4.1) as
the bytes arrive and says when the connection must end, before the codec (``h2_server_codec``)
sees the bytes; the codec then never holds more than one frame.

- A frame longer than our SETTINGS_MAX_FRAME_SIZE (``h2_max_frame_bytes``): FRAME_SIZE_ERROR at
  once (RFC 9113 §4.2; treated as a connection error for every frame type).
- Floods, with Envoy's HTTP/2 flood limits (``Http2ProtocolOptions``) as the
  model, each ended with GOAWAY(ENHANCE_YOUR_CALM):

  * more than ``h2_max_empty_frames`` consecutive DATA, HEADERS or CONTINUATION frames with an
    empty payload (padding aside) and no END_STREAM
    (``max_consecutive_inbound_frames_with_empty_payload``, default 1);
  * more PRIORITY frames than ``h2_max_priority_frames_per_stream`` x (1 + streams opened)
    (``max_inbound_priority_frames_per_stream``, 100);
  * more WINDOW_UPDATE frames than 5 + 2 x (streams opened + ``h2_max_window_updates_per_data_frame``
    x DATA frames sent) (``max_inbound_window_update_frames_per_data_frame_sent``, 10);
  * control frames (PING, SETTINGS, RST_STREAM, frame types the codec ignores): Envoy bounds the
    replies queued for the client (``max_outbound_control_frames``, 1000), but on asyncio a client that
    reads takes each batch of PING/SETTINGS acks at once, so that bound alone leaves a flood's CPU
    cost unbounded. Here they draw on a budget of ``h2_max_control_frames`` refilled at
    ``h2_control_frames_per_s`` (and by one for each stream the client opens, which may end in one
    RST_STREAM); a SETTINGS frame costs one more per six-byte parameter, which the codec applies
    one by one.

"Streams opened" counts HEADERS frames that open a new stream (Envoy counts answered streams).
Per frame the guard reads the header and a pad-length byte, no payload: a DATA frame carrying a
body costs a few comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from dataplane.http.h2_frames import ENHANCE_YOUR_CALM, FRAME_SIZE_ERROR
from dataplane.http.limits import ServerLimits
from dataplane.http.wire import H2_PREFACE

# Frame types (RFC 9113 §6), ``Final``: compiled, each use is a constant, not a global lookup.
_DATA: Final = 0
_HEADERS: Final = 1
_PRIORITY: Final = 2
_SETTINGS: Final = 4
_PUSH_PROMISE: Final = 5
_GOAWAY: Final = 7
_WINDOW_UPDATE: Final = 8
_CONTINUATION: Final = 9
_END_STREAM: Final = 0x1
_PADDED: Final = 0x8
_PRIORITY_FLAG: Final = 0x20
_MORE: Final = -1  # the frame's pad-length byte has not arrived yet


class FrameGuard:
    """The frame-header reader of one server connection (``http2.Http2Connection``)."""

    __slots__ = (
        "_budget",
        "_budget_at",
        "_budget_max",
        "_carry",
        "_clock",
        "_data_frames_sent",
        "_empty",
        "_highest_stream",
        "_max_empty",
        "_max_frame",
        "_per_data_frame",
        "_per_stream",
        "_priority",
        "_refill_per_s",
        "_skip",
        "_streams",
        "_window_updates",
        "_window_updates_allowed",
        "reason",
    )

    def __init__(
        self, limits: ServerLimits, clock: Callable[[], float], data_frames_sent: Callable[[], int]
    ) -> None:
        self._skip = len(H2_PREFACE)  # payload bytes still to pass (first: the client preface)
        self._carry = b""  # the start of a frame header split across reads
        self._max_frame = limits.h2_max_frame_bytes
        self._max_empty = limits.h2_max_empty_frames
        self._empty = 0
        self._per_stream = limits.h2_max_priority_frames_per_stream
        self._priority = 0
        self._per_data_frame = limits.h2_max_window_updates_per_data_frame
        self._window_updates = 0
        self._window_updates_allowed = 5
        self._data_frames_sent = data_frames_sent
        self._streams = 0
        self._highest_stream = 0
        self._budget_max = float(limits.h2_max_control_frames)
        self._budget = self._budget_max
        self._refill_per_s = limits.h2_control_frames_per_s
        self._clock = clock
        self._budget_at = clock()
        self.reason = ""  # why the last non-zero ``check`` ended the connection

    def check(self, data: bytes) -> int:
        """0 when the codec may parse ``data``, else the error code to end the connection with."""
        n = len(data)
        pos = self._skip
        if pos >= n:
            self._skip = pos - n
            return 0
        if self._carry:
            data = self._carry + data
            n = len(data)
            self._carry = b""
        max_frame = self._max_frame
        while True:
            if pos + 9 > n:
                self._carry = data[pos:]
                self._skip = 0
                return 0
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            if length > max_frame:
                self.reason = (
                    f"frame of {length} bytes, SETTINGS_MAX_FRAME_SIZE is {max_frame} (RFC 9113 §4.2)"
                )
                return FRAME_SIZE_ERROR
            kind = data[pos + 3]
            if kind == _DATA and length and not data[pos + 4] & _PADDED:
                self._empty = 0  # the common case: a DATA frame carrying body bytes
            else:
                code = self._frame(data, pos, n, length, kind)
                if code:
                    if code == _MORE:
                        self._carry = data[pos:]
                        self._skip = 0
                        return 0
                    return code
            pos += 9 + length
            if pos >= n:
                self._skip = pos - n
                return 0

    def _frame(self, data: bytes, pos: int, n: int, length: int, kind: int) -> int:
        """Every frame but a plain DATA frame with a payload; 0, ``_MORE`` or an error code."""
        flags = data[pos + 4]
        if kind <= _HEADERS or kind == _CONTINUATION:
            payload = length
            if flags & _PADDED and kind != _CONTINUATION and length:
                if pos + 10 > n:
                    return _MORE
                payload -= 1 + data[pos + 9]
            if kind == _HEADERS:
                if flags & _PRIORITY_FLAG:
                    payload -= 5
                # The stream id from its four octets, the reserved bit cleared (RFC 9113 §4.1):
                # compiled, ``int.from_bytes`` would be a generic call and the slice a copy.
                stream = (
                    ((data[pos + 5] & 0x7F) << 24)
                    | (data[pos + 6] << 16)
                    | (data[pos + 7] << 8)
                    | data[pos + 8]
                )
                if stream > self._highest_stream:
                    self._highest_stream = stream
                    self._streams += 1
                    if self._budget < self._budget_max:
                        self._budget += 1
            if payload > 0 or (flags & _END_STREAM and kind != _CONTINUATION):
                self._empty = 0
                return 0
            self._empty += 1
            if self._empty > self._max_empty:
                self.reason = f"{self._empty} consecutive empty DATA/HEADERS/CONTINUATION frames"
                return ENHANCE_YOUR_CALM
            return 0
        if kind == _WINDOW_UPDATE:
            self._window_updates += 1
            if self._window_updates > self._window_updates_allowed:
                # Recomputed only when passed: DATA frames sent are counted by the connection.
                self._window_updates_allowed = 5 + 2 * (
                    self._streams + self._per_data_frame * self._data_frames_sent()
                )
                if self._window_updates > self._window_updates_allowed:
                    self.reason = f"{self._window_updates} WINDOW_UPDATE frames for the DATA frames sent"
                    return ENHANCE_YOUR_CALM
            return 0
        if kind == _PRIORITY:
            self._priority += 1
            if self._priority > self._per_stream * (1 + self._streams):
                self.reason = f"{self._priority} PRIORITY frames for {self._streams} streams"
                return ENHANCE_YOUR_CALM
            return 0
        if kind in (_GOAWAY, _PUSH_PROMISE):
            return 0  # the first ends the connection; the second is the codec's protocol error
        cost = 1 + length // 6 if kind == _SETTINGS else 1
        now = self._clock()
        budget = self._budget + (now - self._budget_at) * self._refill_per_s
        self._budget_at = now
        budget = (budget if budget < self._budget_max else self._budget_max) - cost
        self._budget = budget
        if budget < 0:
            self.reason = "control frame flood (PING, SETTINGS, RST_STREAM or unknown frame types)"
            return ENHANCE_YOUR_CALM
        return 0
