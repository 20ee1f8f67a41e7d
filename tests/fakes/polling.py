"""Polling an asynchronous condition until it holds, with a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    """Poll ``check`` until true; fail after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        if await check():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.02)


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll the synchronous ``check`` every 10 ms until true; ``TimeoutError`` after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polls state no event announces)
            await asyncio.sleep(0.01)
