"""Raw HTTP/2 clients for hostile-client tests (RFC 9113 §4.1 frames written by hand): one that
sends whatever bytes it is told and records what the server sends back, and one that keeps
request bodies in transit within the server's windows."""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
FRAME_SIZE_ERROR, ENHANCE_YOUR_CALM = 0x6, 0xB


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1), the length taken from ``payload``."""
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def frame_header(kind: int, flags: int, stream: int, length: int) -> bytes:
    """A frame header announcing ``length`` bytes whatever follows."""
    return struct.pack(">I", length)[1:] + bytes((kind, flags)) + struct.pack(">I", stream)


def request_headers(path: str = "/health", method: str = "GET", **extra: str) -> bytes:
    """An HPACK block of a request to the router."""
    fields = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "router")]
    return hpack.Encoder().encode(fields + list(extra.items()))


@dataclass
class RawH2:
    """A prior-knowledge h2 connection that sends whatever bytes it is told to and records every
    frame the server sends back (a reader thread)."""

    port: int
    sock: socket.socket = field(init=False)
    frames: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # kind, flags, stream, payload
    closed: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port))
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    break
                buf += data
                while len(buf) >= 9:
                    length = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + length:
                        break
                    kind, flags = buf[3], buf[4]
                    stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    with self._lock:
                        self.frames.append((kind, flags, stream, buf[9 : 9 + length]))
                    if kind == SETTINGS and not flags & ACK:
                        self.send(frame(SETTINGS, ACK, 0))
                    buf = buf[9 + length :]
        except OSError:
            pass
        finally:
            self.closed.set()

    def send(self, data: bytes) -> bool:
        """Write ``data``; False once the server has closed (or reset) the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def count(self, kind: int, flags: int | None = None) -> int:
        with self._lock:
            return sum(1 for k, f, _, _ in self.frames if k == kind and (flags is None or f & flags == flags))

    def goaway_code(self) -> int | None:
        """The error code of the server's GOAWAY, if it sent one."""
        with self._lock:
            for kind, _, _, payload in self.frames:
                if kind == GOAWAY:
                    return int.from_bytes(payload[4:8], "big")
        return None

    def flood(self, one: bytes, total: int, batch: int = 1000) -> int:
        """Send ``one`` ``total`` times in batches until the server closes; how many were sent."""
        chunk = one * batch
        sent = 0
        while sent < total and not self.closed.is_set():
            if not self.send(chunk):
                break
            sent += batch
        return sent

    def close(self) -> None:
        self.sock.close()


class H2Uploader:
    """An h2 client (python-h2) that opens streams and sends body bytes within the server's
    windows, never ending them: bodies that stay in transit."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.answers: dict[int, int] = {}  # stream -> status the server answered
        self.closed = False

    def open(self, path: str = "/v1/chat/completions") -> int:
        sid: int = self.conn.get_next_available_stream_id()
        fields = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "router")]
        self.conn.send_headers(sid, [*fields, ("content-type", "application/json")])
        self._flush()
        return sid

    def send(self, sid: int, nbytes: int) -> int:
        """Send up to ``nbytes`` of body on ``sid`` (waiting for credit); how many went out."""
        sent = 0
        while sent < nbytes and not self.closed and sid not in self.answers:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self._read(1.0)
                continue
            n = min(window, nbytes - sent)
            self.conn.send_data(sid, b"x" * n)
            self._flush()
            sent += n
        return sent

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def _read(self, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(1 << 20)
        except (TimeoutError, BlockingIOError):
            return
        except OSError:
            data = b""
        finally:
            self.sock.settimeout(None)  # sendall blocks again
        if not data:
            self.closed = True
            return
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                self.answers[ev.stream_id] = int(dict(ev.headers)[b":status"])
        self._flush()

    def drain(self, timeout_s: float = 0.05) -> None:
        """Read whatever the server sent (answers, credit)."""
        if not self.closed:
            self._read(timeout_s)

    def close(self) -> None:
        self.sock.close()
