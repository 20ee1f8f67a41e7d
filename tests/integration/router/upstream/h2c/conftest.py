"""A scriptable h2c server on loopback per test (``tests.fakes.scripted_h2c``): the h2c upstream
driven through every failure mode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.fakes.scripted_h2c import ScriptedH2Server, ScriptedServer


@pytest.fixture
async def h2_server() -> AsyncIterator[ScriptedServer]:
    owner = ScriptedServer()
    loop = asyncio.get_running_loop()
    owner.server = await loop.create_server(lambda: ScriptedH2Server(owner), "127.0.0.1", 0)
    owner.port = owner.server.sockets[0].getsockname()[1]
    yield owner
    owner.server.close()
    for conn in owner.connections:
        if conn.transport is not None:
            conn.transport.close()
    await owner.server.wait_closed()
