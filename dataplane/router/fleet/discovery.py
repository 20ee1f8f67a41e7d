"""Worker registration in standalone mode (SPEC §1 ``--worker``): protocol and model discovery.

``http://H:P`` is HTTP/1.1 unless the worker's ``GET /server_info`` says ``"enable_http2": true``
(read once, here); any failure to read it means HTTP/1.1. ``h2c://H:P`` forces h2c prior
knowledge. The served models come from ``GET /v1/models`` over the chosen protocol, retried
briefly so a router started together with its workers does not lose the race.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from dataplane.errors import RouterError
from dataplane.router.fleet.workers import H2C, HTTP1, WorkerAddress, WorkerSpec, make_pool
from dataplane.router.upstream.base import UpstreamPool

_ACCEPT_JSON = [(b"accept", b"application/json")]


class DiscoveryError(RuntimeError):
    """A worker whose models could not be read; the message is safe to print at startup."""


async def get_json(pool: UpstreamPool, path: bytes, timeout_s: float) -> Any:
    """``GET path`` through ``pool``; the decoded JSON body of a 200 answer."""
    response = await pool.request(b"GET", path, _ACCEPT_JSON, b"", timeout_s=timeout_s)
    body = response.buffered_body()
    if body is None:
        body = b"".join([chunk async for chunk in response.chunks()])
    if response.status != 200:
        raise DiscoveryError(f"GET {path.decode()} answered {response.status}")
    return msgspec.json.decode(body)


async def probe_protocol(address: WorkerAddress, timeout_s: float = 2.0, api_key: str | None = None) -> str:
    """``h2c`` if forced or if ``/server_info`` says ``enable_http2: true``, else ``http1``."""
    if address.forced_h2c:
        return H2C
    pool = make_pool(WorkerSpec(address.url, HTTP1, ()), api_key=api_key)
    try:
        info = await get_json(pool, b"/server_info", timeout_s)
    except (RouterError, DiscoveryError, msgspec.DecodeError):
        return HTTP1
    finally:
        await pool.close()
    return H2C if isinstance(info, dict) and info.get("enable_http2") is True else HTTP1


async def read_models(
    spec: WorkerSpec, *, attempts: int = 8, timeout_s: float = 2.0, api_key: str | None = None
) -> tuple[str, ...]:
    """The ids listed by the worker's ``GET /v1/models`` (OpenAI shape), retried with backoff."""
    pool = make_pool(spec, api_key=api_key)
    delay_s = 0.05
    last = "no answer"
    try:
        for attempt in range(attempts):
            try:
                listing = await get_json(pool, b"/v1/models", timeout_s)
                data = listing["data"] if isinstance(listing, dict) else None
                if not isinstance(data, list):
                    raise DiscoveryError("GET /v1/models: no data list")
                models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
                if not models:
                    raise DiscoveryError("GET /v1/models lists no model")
                return models
            except (RouterError, DiscoveryError, msgspec.DecodeError, KeyError) as exc:
                last = str(exc) or type(exc).__name__
            if attempt + 1 < attempts:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)
    finally:
        await pool.close()
    raise DiscoveryError(f"could not read the models of {spec.url}: {last}")


async def discover(url: str, api_key: str | None = None) -> WorkerSpec:
    """The ``WorkerSpec`` of a ``--worker`` URL (raises ``WorkerUrlError``/``DiscoveryError``);
    ``api_key``: the worker's (``--worker-api-key``)."""
    address = WorkerAddress.parse(url)
    protocol = await probe_protocol(address, api_key=api_key)
    models = await read_models(WorkerSpec(address.url, protocol, ()), api_key=api_key)
    if protocol == HTTP1 and not address.forced_h2c:
        # The probe may have failed only because the worker was still starting (read_models
        # retries for that race): now that it answers, ask once more.
        protocol = await probe_protocol(address, api_key=api_key)
    return WorkerSpec(address.url, protocol, models)
