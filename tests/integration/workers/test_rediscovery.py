"""A worker registered before its engine answered is discovered later, in the background."""

from __future__ import annotations

import asyncio

from controlplane.load.plane import LoadPlane
from controlplane.store.workers import MemoryWorkerRegistry, Protocol
from controlplane.workers.discovery import Discoverer, fetch
from controlplane.workers.url import WorkerUrl
from tests.fakes.load_peers import JsonServer, until

INFO = {
    "enable_http2": True,
    "kv_events": {"endpoint_host": "*", "dp_size": 1, "load_endpoint_port_base": 7001, "load_topic": "load"},
}
MODELS = {"data": [{"id": "late-model"}]}


async def no_wait(_: float) -> None:
    return None


async def test_background_rediscovery_fills_in_endpoints_models_and_protocol() -> None:
    """Discovery failing at registration is retried until the worker answers; then it is stored."""
    registry = MemoryWorkerRegistry()
    plane = LoadPlane(
        registry,
        stale_after_s=3.0,
        push_interval_s=0.05,
        discoverer=Discoverer(sleep=no_wait),
        rediscover_interval_s=0.05,
    )
    await plane.start()
    task = asyncio.create_task(plane.run_rediscovery())
    try:
        async with JsonServer({"/server_info": [(503, {})], "/v1/models": [(503, {})]}) as srv:
            record = await plane.register(srv.url, 0, [], [])
            assert record.load_endpoints == () and record.discovery_error
            assert record.resolved_protocol is Protocol.HTTP1
            srv.script = {"/server_info": [(200, INFO)], "/v1/models": [(200, MODELS)]}
            await until(lambda: bool(plane.workers()[0].load_endpoints))
        (worker,) = plane.workers()
        assert worker.load_endpoints == ("tcp://127.0.0.1:7001",) and worker.models == ("late-model",)
        assert worker.resolved_protocol is Protocol.H2C and worker.discovery_error == ""
        assert (await registry.list()) == [worker]
        assert plane.subscriber.socket_count(worker.url) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await plane.stop()


async def test_one_worker_per_host_port_across_schemes() -> None:
    """h2c://H:P replaces http://H:P (and removing either name removes it)."""
    plane = LoadPlane(MemoryWorkerRegistry(), stale_after_s=3.0, push_interval_s=0.05)
    await plane.start()
    try:
        await plane.register("http://127.0.0.1:9001", 2, ["m"], ["tcp://127.0.0.1:9"])
        await plane.register("h2c://127.0.0.1:9001", 3, ["m"], ["tcp://127.0.0.1:9"])
        assert [w.url for w in plane.workers()] == ["h2c://127.0.0.1:9001"]
        await plane.deregister("http://127.0.0.1:9001/")
        assert plane.workers() == [] and plane.subscriber.socket_count() == 0
    finally:
        await plane.stop()


async def test_a_worker_that_breaks_rediscovery_does_not_stop_it_for_the_others() -> None:
    """An unexpected error while asking one worker is logged; the others are still discovered."""
    broken_host = "127.0.0.2"
    armed = asyncio.Event()  # registration itself goes through (refused connections)

    async def get(worker: WorkerUrl, path: str, h2c_first: bool, timeout_s: float) -> tuple[int, bytes, bool]:
        if armed.is_set() and worker.host == broken_host:
            raise RuntimeError("a bug in discovery")
        return await fetch(worker, path, h2c_first, timeout_s)

    plane = LoadPlane(
        MemoryWorkerRegistry(),
        stale_after_s=3.0,
        push_interval_s=0.05,
        discoverer=Discoverer(get=get, sleep=no_wait),
        rediscover_interval_s=0.05,
    )
    await plane.start()
    task = asyncio.create_task(plane.run_rediscovery())
    try:
        async with JsonServer({"/server_info": [(503, {})], "/v1/models": [(503, {})]}) as srv:
            await plane.register(f"http://{broken_host}:9", 0, [], [])
            await plane.register(srv.url, 0, [], [])
            armed.set()
            await asyncio.sleep(0.3)  # the broken worker has failed a few rounds by now
            srv.script = {"/server_info": [(200, INFO)], "/v1/models": [(200, MODELS)]}
            await until(lambda: any(w.load_endpoints for w in plane.workers()))
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await plane.stop()


async def test_a_worker_registered_before_its_engine_is_asked_again_within_seconds() -> None:
    """The first background retry comes about a second after registration, not a whole interval."""
    plane = LoadPlane(
        MemoryWorkerRegistry(),
        stale_after_s=3.0,
        push_interval_s=0.05,
        discoverer=Discoverer(sleep=no_wait),
        rediscover_interval_s=60.0,
        rediscover_first_s=0.2,
    )
    await plane.start()
    task = asyncio.create_task(plane.run_rediscovery())
    try:
        async with JsonServer({"/server_info": [(503, {})], "/v1/models": [(503, {})]}) as srv:
            await plane.register(srv.url, 0, [], [])
            srv.script = {"/server_info": [(200, INFO)], "/v1/models": [(200, MODELS)]}
            await until(lambda: bool(plane.workers()[0].load_endpoints), timeout_s=3.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await plane.stop()
