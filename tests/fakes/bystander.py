"""A well-behaved client measuring what it gets while others attack the server: ``GET`` (or a POST
of a JSON body) in a loop on its own connection, every status and latency recorded."""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Bystander:
    """A well-behaved client on its own connections: ``GET /health`` in a loop on a thread,
    recording every status and latency until stopped."""

    port: int
    path: str = "/health"
    body: bytes | None = None  # POSTed as JSON when given
    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Bystander:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self.body is None:
                    conn.request("GET", self.path)
                else:
                    conn.request("POST", self.path, self.body, {"content-type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                self.statuses.append(resp.status)
                self.latencies.append(time.monotonic() - started)
            except (OSError, http.client.HTTPException) as exc:
                self.errors.append(repr(exc))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
            time.sleep(0.02)
        conn.close()
