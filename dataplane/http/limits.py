"""Limits of the shared HTTP server (SPEC §5): one frozen settings struct."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Every bound the server enforces; units are in the names.

    ``read_timeout_s`` bounds the time from a request's first byte to its last (headers and
    body together), so a client trickling bytes cannot hold a connection or an h2 stream
    forever; ``idle_timeout_s`` bounds a keep-alive connection with no request in progress.
    A request whose handler is running has no server-side deadline: the router enforces
    ``--request-timeout-s`` itself.

    Request body memory: ``max_buffered_body_bytes`` bounds the body bytes the
    whole server holds (bodies still arriving, and those of requests not yet answered: Envoy's
    overload manager is the model), ``max_connection_body_bytes`` the bytes of bodies still
    arriving on one connection (Envoy's ``per_connection_buffer_limit_bytes``; the h2 windows we
    advertise are capped at it). 0 means: ``max_body_bytes`` for the second, the larger of 256 MiB
    and the second for the first. HTTP/1.1 counts a body once it passes ``max_header_bytes``: a
    smaller one costs what a request head does, which is not counted either. The h2 flood limits
    are described in ``h2_guard``.
    """

    max_body_bytes: int = 32 * MIB
    max_header_bytes: int = 64 * 1024
    idle_timeout_s: float = 75.0
    read_timeout_s: float = 30.0
    # A ``write`` blocked this long on a client that does not read aborts that client.
    write_timeout_s: float = 60.0
    # HTTP/1.1: requests parsed ahead of their answers before reading pauses (pipelining depth).
    h1_max_pipelined: int = 16
    h2_max_concurrent_streams: int = 1000
    # RFC 9113 §6.9.2: we advertise large windows so an upload is never throttled by credit.
    h2_initial_window_bytes: int = 16 * MIB
    h2_connection_window_bytes: int = 16 * MIB
    h2_max_frame_bytes: int = 64 * 1024
    # A streaming writer waits once this much of its answer is queued behind flow control.
    h2_stream_buffer_bytes: int = 256 * 1024
    # After an error answer (413, 400, …) unread input is drained this long before closing,
    # so the client reads the answer instead of a TCP reset (RFC 9112 §9.6 "lingering close").
    linger_s: float = 2.0
    max_buffered_body_bytes: int = 0
    max_connection_body_bytes: int = 0
    # Flood limits (``h2_guard``; Envoy's defaults where Envoy has the limit).
    h2_max_control_frames: int = 1000
    h2_control_frames_per_s: float = 100.0
    h2_max_empty_frames: int = 1
    h2_max_priority_frames_per_stream: int = 100
    h2_max_window_updates_per_data_frame: int = 10

    def __post_init__(self) -> None:
        # Resolved here (the dataclass is frozen): every reader sees the effective limit.
        if not self.max_connection_body_bytes:
            object.__setattr__(self, "max_connection_body_bytes", self.max_body_bytes)
        if not self.max_buffered_body_bytes:
            object.__setattr__(
                self, "max_buffered_body_bytes", max(256 * MIB, self.max_connection_body_bytes)
            )
        if not self.max_body_bytes <= self.max_connection_body_bytes <= self.max_buffered_body_bytes:
            raise ValueError(
                "ServerLimits: need max_body_bytes <= max_connection_body_bytes <= max_buffered_body_bytes, got "
                f"{self.max_body_bytes}, {self.max_connection_body_bytes}, {self.max_buffered_body_bytes}"
            )
        for name in ("h2_max_control_frames", "h2_max_priority_frames_per_stream"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerLimits.{name} must be at least 1, got {getattr(self, name)}")
        if self.h2_max_empty_frames < 0 or self.h2_max_window_updates_per_data_frame < 1:
            raise ValueError(
                "ServerLimits: h2_max_empty_frames >= 0, h2_max_window_updates_per_data_frame >= 1"
            )
        if not self.h2_control_frames_per_s >= 0:
            raise ValueError("ServerLimits.h2_control_frames_per_s must be 0 or more")
        for name in ("max_body_bytes", "max_header_bytes", "h1_max_pipelined", "h2_max_concurrent_streams"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerLimits.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("idle_timeout_s", "read_timeout_s", "write_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ServerLimits.{name} must be positive, got {getattr(self, name)}")
        if not 65535 <= self.h2_initial_window_bytes <= 2**31 - 1:
            raise ValueError("ServerLimits.h2_initial_window_bytes must be in [65535, 2**31-1]")
        if not 65535 <= self.h2_connection_window_bytes <= 2**31 - 1:
            raise ValueError("ServerLimits.h2_connection_window_bytes must be in [65535, 2**31-1]")
        if not 16384 <= self.h2_max_frame_bytes <= 2**24 - 1:
            raise ValueError("ServerLimits.h2_max_frame_bytes must be in [16384, 2**24-1]")
