"""ZMTP 3.0 as a SUB peer speaks it (pure): greeting, NULL handshake, frames (RFC 23/ZMTP).

The ingest reads its publishers' TCP streams itself instead of through libzmq, because
of a same-run measurement (``bench/load_ingest.py --ingest zmtp libzmq``, bench/README.md)
against the best libzmq design we have: SUB sockets read in batches by the same drain
before each push (``bench/libzmq_subscriber.py``: one ``zmq_poll`` per drain, then
``recv(copy=False)`` until ``ZMQ_EVENTS`` says empty, no exceptions). At 1000 publishers x
20 frames/s it cost 1.3-1.8x the CPU per frame of this ingest (median 1.45x over six
pairs: 34-45 against 23-29 µs) with 2-3x the p99 (320-660 against 165-220 ms); at 100
publishers 1.5-1.8x (70-81 against 43-46 µs, p99 alike). The difference is mostly
libzmq's I/O thread (0.38 core at 20 000 frames/s): each frame arrives alone on its
connection, so for each one it wakes, reads it and signals the socket's mailbox; the main
thread costs about the same either way. Only what a SUB needs is here: the NULL mechanism
(SGLang's publisher uses no security), the subscription, and answers to PINGs.

We announce version 3.0, so a libzmq 4.x publisher takes subscriptions as messages
(``0x01`` + topic) rather than the 3.1 SUBSCRIBE command (RFC 23 and libzmq's
``zmtp_engine``: a 3.0 peer gets the 3.0 encoder).
"""

from __future__ import annotations

GREETING_BYTES = 64
_SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"
_NULL = b"NULL".ljust(20, b"\x00")
# signature, version 3.0, mechanism, as-server = 0, filler
GREETING = _SIGNATURE + b"\x03\x00" + _NULL + b"\x00" + b"\x00" * 31

_MORE = 0x01
_LONG = 0x02
_COMMAND = 0x04
_PUBLISHERS = (b"PUB", b"XPUB")


class ZmtpError(ValueError):
    """The peer broke the protocol: drop the connection."""


def check_greeting(greeting: bytes) -> None:
    """Accept a ZMTP 3.x peer using the NULL mechanism (the 64 bytes it sent first)."""
    if len(greeting) != GREETING_BYTES or greeting[0] != 0xFF or greeting[9] != 0x7F:
        raise ZmtpError("not a ZMTP 3 peer (bad signature)")
    if greeting[10] < 3:
        raise ZmtpError(f"ZMTP version {greeting[10]}.{greeting[11]} is too old (3.0 or newer needed)")
    if greeting[12:32] != _NULL:
        raise ZmtpError(f"security mechanism {greeting[12:32].rstrip(bytes(1))!r} is not NULL")


def _frame(body: bytes, flags: int) -> bytes:
    size = len(body)
    if size > 255:
        return bytes([flags | _LONG]) + size.to_bytes(8, "big") + body
    return bytes([flags, size]) + body


def ready_command(socket_type: bytes = b"SUB") -> bytes:
    """Our READY: the one property a NULL handshake needs, ``Socket-Type``."""
    name = b"Socket-Type"
    body = b"\x05READY" + bytes([len(name)]) + name + len(socket_type).to_bytes(4, "big") + socket_type
    return _frame(body, _COMMAND)


def subscribe_message(topic: bytes) -> bytes:
    """A ZMTP 3.0 subscription: a one-frame message ``0x01 + topic``."""
    return _frame(b"\x01" + topic, 0)


def parse_ready(body: bytes) -> dict[bytes, bytes]:
    """The properties of a READY command body; ZmtpError unless its peer is a publisher."""
    if body[:6] != b"\x05READY":
        raise ZmtpError(f"expected READY, got command {body[1 : 1 + body[0]]!r}" if body else "empty command")
    props: dict[bytes, bytes] = {}
    pos = 6
    while pos < len(body):
        name_len = body[pos]
        name = body[pos + 1 : pos + 1 + name_len]
        pos += 1 + name_len
        if pos + 4 > len(body):
            raise ZmtpError("truncated READY property")
        value_len = int.from_bytes(body[pos : pos + 4], "big")
        pos += 4
        if pos + value_len > len(body):
            raise ZmtpError("truncated READY property")
        props[name.lower()] = body[pos : pos + value_len]
        pos += value_len
    kind = props.get(b"socket-type", b"")
    if kind not in _PUBLISHERS:
        raise ZmtpError(f"peer socket type {kind!r} cannot publish to a SUB")
    return props


class FrameReader:
    """Splits a ZMTP byte stream into messages (lists of frames), across any read boundary.

    Commands are taken out of the stream: READY is kept for the handshake, a PING queues
    its PONG in ``replies`` (for the adapter to send), an ERROR raises.

    A message is refused, not buffered, when one of its frames is longer than
    ``max_frame_bytes`` or it has more than ``max_parts`` frames: its bytes are discarded
    as they arrive (memory stays bounded whatever a peer announces) and the reason is
    queued in ``refused`` when the message ends, for the adapter to count it as malformed
    (a load message is three short frames). The connection stays up, as it would for any
    other garbage frame.
    """

    __slots__ = (
        "_buf",
        "_junk",
        "_parts",
        "_skip_more",
        "max_frame_bytes",
        "max_parts",
        "ready",
        "refused",
        "replies",
        "skip",
    )

    def __init__(self, max_frame_bytes: int, max_parts: int = 16) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_parts = max_parts
        self._buf = b""
        self._parts: list[bytes] = []
        self.ready: dict[bytes, bytes] | None = None
        self.replies: list[bytes] = []
        self.refused: list[str] = []
        # A message being refused: why (and ``_parts`` holds a placeholder, so the fast path
        # below stays off); ``skip``: the bytes of its current frame still to discard (the
        # adapter reads bigger chunks meanwhile), and whether more frames follow that one.
        self._junk = ""
        self.skip = 0
        self._skip_more = False

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The messages completed by ``data``; a partial one waits for the next feed."""
        if (
            not self._buf
            and not self._parts
            and len(data) > 18
            and data[0] == 1
            and data[1] == 4
            and data[6] == 1
            and data[7] == 8
            and data[16] == 0
            and data[17] + 18 == len(data)
        ):
            # The one shape a load publisher sends (SPEC §7), alone in one read (the usual
            # case): [4-byte topic, 8-byte seq, short payload] without the general loop.
            return [[data[2:6], data[8:16], data[18:]]]
        if self.skip:
            if len(data) < self.skip:
                self.skip -= len(data)
                return []
            data = data[self.skip :]
            self.skip = 0
            if not self._skip_more:
                self._end_junk()
        buf = self._buf + data if self._buf else data
        end = len(buf)
        pos = 0
        messages: list[list[bytes]] = []
        parts = self._parts
        while end - pos >= 2:
            if (
                not parts
                and end - pos > 18
                and buf[pos] == 1
                and buf[pos + 1] == 4
                and buf[pos + 6] == 1
                and buf[pos + 7] == 8
                and buf[pos + 16] == 0
            ):
                # A load message in one step (a backlog is a run of them).
                stop = pos + 18 + buf[pos + 17]
                if stop > end:
                    break
                messages.append([buf[pos + 2 : pos + 6], buf[pos + 8 : pos + 16], buf[pos + 18 : stop]])
                pos = stop
                continue
            flags = buf[pos]
            if flags & _LONG:
                if end - pos < 9:
                    break
                size = int.from_bytes(buf[pos + 1 : pos + 9], "big")
                start = pos + 9
            else:
                size = buf[pos + 1]
                start = pos + 2
            if flags & ~(_MORE | _LONG | _COMMAND):
                raise ZmtpError(f"reserved frame flags 0x{flags:02x}")
            more = bool(flags & _MORE)
            if size > self.max_frame_bytes:
                if flags & _COMMAND:
                    raise ZmtpError(f"command of {size} bytes exceeds {self.max_frame_bytes}")
                parts = self._start_junk(f"frame of {size} bytes exceeds {self.max_frame_bytes}")
                if start + size > end:  # the usual case: discard the rest as it arrives
                    self.skip = start + size - end
                    self._skip_more = more
                    pos = end
                    break
                pos = start + size
                if not more:
                    parts = self._end_junk()
                continue
            stop = start + size
            if stop > end:
                break
            pos = stop
            if flags & _COMMAND:
                self._command(buf[start:stop])
            elif self._junk:
                if not more:
                    parts = self._end_junk()
            elif more:
                parts.append(buf[start:stop])
                if len(parts) >= self.max_parts:
                    parts = self._start_junk(f"message of more than {self.max_parts} frames")
            else:
                parts.append(buf[start:stop])
                messages.append(parts)
                parts = []
        self._parts = parts
        self._buf = buf[pos:] if pos < end else b""
        return messages

    def _start_junk(self, reason: str) -> list[bytes]:
        if not self._junk:
            self._junk = reason
            self._parts = [b""]
        return self._parts

    def _end_junk(self) -> list[bytes]:
        self.refused.append(self._junk)
        self._junk = ""
        self._parts = []
        return self._parts

    def _command(self, body: bytes) -> None:
        if not body or len(body) < 1 + body[0]:
            raise ZmtpError("malformed command frame")
        name = body[1 : 1 + body[0]]
        if name == b"READY":
            if self.ready is not None:
                raise ZmtpError("second READY")
            self.ready = parse_ready(body)
        elif name == b"PING":
            # PING: TTL (2 bytes) then a context of up to 16 bytes echoed in the PONG.
            self.replies.append(_frame(b"\x04PONG" + body[7:23], _COMMAND))
        elif name == b"ERROR":
            reason = body[7 : 7 + body[6]] if len(body) > 6 else b""
            raise ZmtpError(f"peer sent ERROR {reason!r}")
        # Other commands (PONG, SUBSCRIBE echoes of newer peers) mean nothing to a SUB.
