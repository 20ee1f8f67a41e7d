"""Upstream pools for unit tests that need a worker but never send to it."""

from __future__ import annotations

from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.upstream.base import UpstreamResponse


class FakePool:
    """An UpstreamPool that is never called (no sockets in unit tests)."""

    protocol = "http1"

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec

    async def request(
        self, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes, *, timeout_s: float
    ) -> UpstreamResponse:
        raise AssertionError("unit tests never send")

    async def close(self) -> None:
        return None
