"""A listener of the h2c client codec (``CodecListener``) that records every callback."""

from __future__ import annotations

from dataplane.router.upstream.h2c.codec import CodecListener


class Recorder(CodecListener):
    """A CodecListener that records every callback."""

    def __init__(self) -> None:
        self.headers: dict[int, list[tuple[bytes, bytes]]] = {}
        self.data: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.goaway: tuple[int, int] | None = None
        self.windows = 0
        self.settings = 0

    def on_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        self.headers[stream_id] = headers
        if end_stream:
            self.ended.add(stream_id)

    def on_data(self, stream_id: int, data: bytes, flow_controlled: int, end_stream: bool) -> None:
        self.data[stream_id] = self.data.get(stream_id, b"") + data
        if end_stream:
            self.ended.add(stream_id)

    def on_reset(self, stream_id: int, code: int) -> None:
        self.resets[stream_id] = code

    def on_goaway(self, last_stream_id: int, code: int) -> None:
        self.goaway = (last_stream_id, code)

    def on_window(self) -> None:
        self.windows += 1

    def on_settings(self) -> None:
        self.settings += 1
