"""A real headless Chromium (Debian's ``chromium``), driven over the DevTools protocol on loopback.

    with HeadlessChromium(tmp_path) as browser:      # skips when the binary is absent (not in CI)
        value, png = asyncio.run(browser.read(url, EXPRESSION))

``read`` loads the page, waits for its load event, evaluates one expression in it (what the test
wants to know of the rendered page: ``innerText``, computed styles, element boxes) and takes a
screenshot. The page under test needs no script of its own; the expression is the test's eyes.
The browser listens on 127.0.0.1 on a port it picks (``--remote-debugging-port=0``, written to
``DevToolsActivePort`` in its profile directory), with a throw-away profile.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import pytest

# CI sets this (.ci/run) so that a missing browser fails there instead of skipping.
REQUIRE_ENV = "FLEETPLANE_REQUIRE_BROWSER"


def chromium_binary() -> str:
    """The chromium binary, or skip (fail where REQUIRE_ENV is set) saying how to get it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "chromium not installed: the status page's browser test needs Debian's chromium package (scripts/install_chromium.sh installs it)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{why}; {REQUIRE_ENV} is set, so it must run here")
        pytest.skip(why)
    return found


class HeadlessChromium:
    """``chromium --headless`` with a fresh profile under ``workdir``; stopped (by PID) on exit."""

    def __init__(self, workdir: Path, width: int = 1400, height: int = 1000) -> None:
        self._binary = chromium_binary()
        self._profile = workdir / "chromium-profile"
        self._log_path = workdir / "chromium.log"
        self._size = (width, height)
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> HeadlessChromium:
        self._profile.mkdir(parents=True, exist_ok=True)
        argv = [
            self._binary,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-dev-shm-usage",  # /dev/shm is small in containers
            f"--user-data-dir={self._profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--window-size={self._size[0]},{self._size[1]}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        with self._log_path.open("wb") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        active = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.is_file() and active.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"chromium did not start:\n{self._log_path.read_text(errors='replace')}")
            time.sleep(0.05)
        self.port = int(active.read_text().split()[0])
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    async def read(self, url: str, expression: str) -> tuple[Any, bytes]:
        """Load ``url`` in the browser's tab; ``expression``'s value there (JSON) and a PNG
        screenshot of the whole page as rendered."""
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{self.port}/json/list") as resp:
                targets = await resp.json()
            (tab,) = [t for t in targets if t["type"] == "page"][:1]
            async with http.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024) as ws:
                session = _Session(ws)
                await session.call("Page.enable")
                await session.call("Page.navigate", {"url": url})
                await session.event("Page.loadEventFired", timeout_s=20)
                value = await session.call(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True}
                )
                if "exceptionDetails" in value:
                    raise AssertionError(f"the test's expression failed: {value['exceptionDetails']}")
                shot = await session.call(
                    "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
                )
                return value["result"]["value"], base64.b64decode(shot["data"])


class _Session:
    """Numbered DevTools calls over one WebSocket; events are kept until asked for."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 0
        self._events: list[str] = []

    async def _receive(self, timeout_s: float) -> dict[str, Any]:
        message = await self._ws.receive(timeout=timeout_s)
        if message.type is not aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"DevTools connection ended: {message.type.name}")
        decoded: dict[str, Any] = json.loads(message.data)
        return decoded

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        await self._ws.send_str(json.dumps({"id": self._next_id, "method": method, "params": params or {}}))
        while True:
            message = await self._receive(timeout_s=20)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result
            if "method" in message:
                self._events.append(message["method"])

    async def event(self, method: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while method not in self._events:
            message = await self._receive(timeout_s=max(0.1, deadline - time.monotonic()))
            if "method" in message:
                self._events.append(message["method"])
