"""Startup with some --workers down: placeholders, then late discovery (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from dataplane.router.fleet.discovery import DiscoveryError
from dataplane.router.fleet.late_workers import LateDiscovery, discover_fleet, placeholder
from dataplane.router.fleet.workers import H2C, HTTP1, WorkerSpec, WorkerUrlError


def _fake(up: set[str]):  # type: ignore[no-untyped-def]
    async def discover_one(url: str) -> WorkerSpec:
        if url not in up:
            raise DiscoveryError(f"could not read the models of {url}")
        return WorkerSpec(url, HTTP1, ("m",))

    return discover_one


async def test_fleet_starts_with_the_workers_that_answer() -> None:
    """Discovered workers come back as specs, the silent ones as pending URLs."""
    specs, pending = await discover_fleet(["http://a:1", "http://b:2"], _fake({"http://a:1"}))
    assert [s.url for s in specs] == ["http://a:1"]
    assert pending == ["http://b:2"]


async def test_no_worker_answering_is_an_error() -> None:
    """When no --worker answers, the first discovery error is raised (a startup error)."""
    with pytest.raises(DiscoveryError, match="http://a:1"):
        await discover_fleet(["http://a:1", "http://b:2"], _fake(set()))


async def test_malformed_url_is_an_error_even_with_others_up() -> None:
    """A malformed --worker URL is never deferred."""

    async def discover_one(url: str) -> WorkerSpec:
        raise WorkerUrlError(url)

    with pytest.raises(WorkerUrlError):
        await discover_fleet(["ftp://x"], discover_one)


def test_placeholder_keeps_the_forced_protocol_and_serves_nothing() -> None:
    """A placeholder is never chosen (no models); h2c:// stays h2c."""
    assert placeholder("h2c://h:9") == WorkerSpec("h2c://h:9", H2C, ())
    assert placeholder("http://h:9/") == WorkerSpec("http://h:9", HTTP1, ())


async def test_late_worker_is_applied_once_it_answers() -> None:
    """The pending worker's real spec is applied as soon as its discovery succeeds."""
    up: set[str] = set()
    applied: list[list[WorkerSpec]] = []
    known = [WorkerSpec("http://a:1", HTTP1, ("m",))]
    late = LateDiscovery(known, ["http://b:2"], applied.append, discover_one=_fake(up), interval_s=0.01)
    assert [s.models for s in late.specs()] == [("m",), ()]
    late.start()
    await asyncio.sleep(0.05)
    assert applied == []
    up.add("http://b:2")
    for _ in range(100):
        if applied:
            break
        await asyncio.sleep(0.01)
    await late.stop()
    assert [(s.url, s.models) for s in applied[-1]] == [("http://a:1", ("m",)), ("http://b:2", ("m",))]
