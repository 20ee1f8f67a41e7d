"""Worker discovery from ``GET /server_info`` and ``GET /v1/models`` (SPEC §1, §6, §7).

As sgl-router's ``fetch_event_config`` (reference D): 3 attempts of 2 s each, 100 ms
backoff doubling; network errors and 5xx are retried, 4xx and unparsable JSON are final.
``enable_http2`` decides an AUTO protocol; ``kv_events`` gives the load port base, topic and
dp size, with a wildcard ``endpoint_host`` replaced by the worker URL's host.

The parsing is pure (``parse_server_info``, ``parse_models``); the fetch is a small HTTP
client (``controlplane.workers.httpget``) that speaks HTTP/1.1 or h2c prior knowledge, since an
``engine-sim --http2`` worker only speaks the latter: ``h2c://`` workers are asked over h2c,
others over HTTP/1.1 first and over h2c when the answer is not HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from controlplane.store.workers import LOAD_TOPIC, Protocol
from controlplane.workers.httpget import HttpGetError, ProtocolMismatch, get_h1, get_h2c
from controlplane.workers.registration import (
    MAX_LOAD_ENDPOINTS,
    MAX_MODEL_NAME,
    MAX_MODELS,
    WILDCARD_HOSTS,
    advertised_host,
    is_model_name,
    tcp_endpoint,
)
from controlplane.workers.url import WorkerUrl

ATTEMPTS = 3
ATTEMPT_TIMEOUT_S = 2.0
FIRST_BACKOFF_S = 0.1


class DiscoveryError(Exception):
    """Discovery gave up; the message says why (it lands in ``Worker.discovery_error``)."""


class _Retryable(DiscoveryError):
    """A network error or a 5xx: worth another attempt."""


class Unreachable(DiscoveryError):
    """Every attempt failed with a network error or a 5xx: asking again now is pointless."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/server_info`` says about a worker."""

    http2: bool
    load_endpoints: tuple[str, ...]
    load_topic: str
    # Why there are no load endpoints ("" when there are).
    load_reason: str


def parse_server_info(doc: Any, worker: WorkerUrl) -> ServerInfo:
    """Read ``enable_http2`` and the ``kv_events`` load range (SPEC §7, reference C.3)."""
    if not isinstance(doc, dict):
        raise DiscoveryError("/server_info is not a JSON object")
    http2 = doc.get("enable_http2") is True
    kv = doc.get("kv_events")
    if not isinstance(kv, dict):
        return ServerInfo(http2, (), LOAD_TOPIC, "the worker advertises no kv_events in /server_info")
    base, topic = kv.get("load_endpoint_port_base"), kv.get("load_topic")
    if base is None or topic is None:
        return ServerInfo(
            http2, (), LOAD_TOPIC, "the worker does not publish load (no load_endpoint_port_base)"
        )
    dp_size = kv.get("dp_size", 1)
    advertised = kv.get("endpoint_host")
    if not _is_int(base) or not _is_int(dp_size) or not isinstance(topic, str) or not topic:
        raise DiscoveryError(f"/server_info kv_events has malformed load fields: {_clip(kv)}")
    if not 1 <= dp_size <= MAX_LOAD_ENDPOINTS or base <= 0 or base + dp_size - 1 > 65535:
        raise DiscoveryError(f"/server_info kv_events load range is out of bounds: {_clip(kv)}")
    # Checked as strictly as an explicit load endpoint: the subscriber connects to what is
    # stored here, and any JSON value may arrive (a list is not even hashable).
    if advertised is None or (isinstance(advertised, str) and advertised in WILDCARD_HOSTS):
        host: str | None = worker.host
    else:
        host = advertised_host(advertised) if isinstance(advertised, str) else None
    if host is None:
        raise DiscoveryError(f"/server_info kv_events endpoint_host is malformed: {_clip(advertised)}")
    if host in WILDCARD_HOSTS:  # another spelling of one, e.g. 0:0:0:0:0:0:0:0
        host = worker.host
    endpoints = tuple(tcp_endpoint(host, base + rank) for rank in range(dp_size))
    return ServerInfo(http2, endpoints, topic, "")


def parse_models(doc: Any) -> tuple[tuple[str, ...], str]:
    """Model ids of an OpenAI ``GET /v1/models`` answer, and what was left out (or "").

    The ids pass the rules of RegisterWorker's ``models`` (a name, at most ``MAX_MODELS``):
    a worker cannot store what an operator could not, nor bloat every ListWorkers answer.
    """
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise DiscoveryError("/v1/models has no data list")
    found: dict[str, None] = {}  # ordered, without repeats
    bad = 0
    for item in data:
        model_id = item.get("id") if isinstance(item, dict) else None
        if is_model_name(model_id):
            found[model_id] = None
        else:
            bad += 1
    models = list(found)
    notes = []
    if bad:
        notes.append(
            f"{bad} of {len(data)} entries without a valid id (1..{MAX_MODEL_NAME} printable characters)"
        )
    if len(models) > MAX_MODELS:
        notes.append(f"{len(models)} models, kept the first {MAX_MODELS}")
        models = models[:MAX_MODELS]
    return tuple(models), f"/v1/models: left out {'; '.join(notes)}" if notes else ""


@dataclass(frozen=True, slots=True)
class Discovery:
    """The outcome of discovering one worker."""

    resolved_protocol: Protocol
    load_endpoints: tuple[str, ...]
    load_topic: str
    models: tuple[str, ...]
    # Empty when everything asked for was found; else why not (reported, not raised).
    error: str


Getter = Callable[[WorkerUrl, str, bool, float], Awaitable[tuple[int, bytes, bool]]]


class Discoverer:
    """Runs discovery with retries; the getter and sleep are injectable for tests."""

    def __init__(
        self,
        *,
        get: Getter | None = None,
        attempts: int = ATTEMPTS,
        timeout_s: float = ATTEMPT_TIMEOUT_S,
        first_backoff_s: float = FIRST_BACKOFF_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        worker_api_key: str | None = None,
    ) -> None:
        if get is None:
            # SGLang's --api-key guards /server_info and /v1/models too: ask with the key.
            get = functools.partial(
                fetch, authorization=f"Bearer {worker_api_key}" if worker_api_key else None
            )
        self._get = get
        self._attempts = attempts
        self._timeout_s = timeout_s
        self._first_backoff_s = first_backoff_s
        self._sleep = sleep

    async def discover(
        self,
        worker: WorkerUrl,
        protocol: Protocol,
        *,
        want_endpoints: bool,
        want_models: bool,
        budget_s: float | None = None,
    ) -> Discovery:
        """Ask the worker what is missing; failures are reported in ``Discovery.error``.

        ``budget_s`` bounds the whole discovery (the RegisterWorker caller's deadline): an
        attempt never outlives it, and no retry starts that could not finish in it.
        """
        loop = asyncio.get_running_loop()
        deadline = None if budget_s is None else loop.time() + max(0.0, budget_s)
        forced = Protocol.H2C if worker.scheme == "h2c" else protocol
        h2c_first = forced is Protocol.H2C
        resolved = forced if forced is not Protocol.AUTO else Protocol.HTTP1
        endpoints: tuple[str, ...] = ()
        topic = LOAD_TOPIC
        models: tuple[str, ...] = ()
        errors: list[str] = []
        unreachable = False
        spoke: set[bool] = set()  # whether answers came over h2c
        if want_endpoints or forced is Protocol.AUTO:
            try:
                body, spoke_h2c = await self._get_json(worker, "/server_info", h2c_first, deadline)
                spoke.add(spoke_h2c)
                info = parse_server_info(body, worker)
            except DiscoveryError as exc:
                unreachable = isinstance(exc, Unreachable)
                if forced is Protocol.AUTO:
                    errors.append(f"protocol AUTO assumed HTTP/1.1: {exc}")
                else:
                    errors.append(str(exc))
            else:
                if forced is Protocol.AUTO:
                    resolved = Protocol.H2C if info.http2 or spoke_h2c else Protocol.HTTP1
                h2c_first = resolved is Protocol.H2C
                if want_endpoints:
                    endpoints, topic = info.load_endpoints, info.load_topic
                    if info.load_reason:
                        errors.append(info.load_reason)
        if want_models and not unreachable:
            try:
                body, spoke_h2c = await self._get_json(worker, "/v1/models", h2c_first, deadline)
                spoke.add(spoke_h2c)
                models, left_out = parse_models(body)
            except DiscoveryError as exc:
                errors.append(str(exc))
            else:
                if left_out:
                    errors.append(left_out)
        if forced is not Protocol.AUTO and spoke == {forced is not Protocol.H2C}:
            # Kept as asked (the operator's call), but said: routers will fail to speak to it.
            asked, answered = ("h2c", "HTTP/1.1") if forced is Protocol.H2C else ("HTTP/1.1", "h2c")
            errors.append(f"the worker answered only over {answered}, not {asked} as asked")
        return Discovery(resolved, endpoints, topic, models, "; ".join(errors))

    async def _get_json(
        self, worker: WorkerUrl, path: str, h2c_first: bool, deadline: float | None
    ) -> tuple[Any, bool]:
        loop = asyncio.get_running_loop()
        delay = self._first_backoff_s
        for attempt in range(1, self._attempts + 1):
            timeout_s = self._timeout_s
            if deadline is not None:
                timeout_s = min(timeout_s, deadline - loop.time())
                if timeout_s <= 0.05:
                    raise Unreachable(f"GET {worker.url}{path}: no time left within the call's deadline")
            try:
                status, body, spoke_h2c = await self._get(worker, path, h2c_first, timeout_s)
                if status >= 500:
                    raise _Retryable(f"GET {worker.url}{path}: HTTP {status}")
                if status >= 400:
                    raise DiscoveryError(f"GET {worker.url}{path}: HTTP {status}")
                try:
                    return json.loads(body), spoke_h2c
                except (ValueError, UnicodeDecodeError) as exc:
                    raise DiscoveryError(f"GET {worker.url}{path}: not JSON ({exc})") from None
                except RecursionError:
                    raise DiscoveryError(f"GET {worker.url}{path}: JSON nested too deeply") from None
            except _Retryable as exc:
                out_of_time = deadline is not None and loop.time() + delay >= deadline
                if attempt == self._attempts or out_of_time:
                    raise Unreachable(f"{exc} (after {attempt} attempts)") from None
            await self._sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")


async def fetch(
    worker: WorkerUrl, path: str, h2c_first: bool, timeout_s: float, authorization: str | None = None
) -> tuple[int, bytes, bool]:
    """``(status, body, spoke_h2c)``; falls back to the other protocol on a mismatch."""
    order = (True, False) if h2c_first else (False, True)
    last: Exception | None = None
    for use_h2c in order:
        try:
            async with asyncio.timeout(timeout_s):
                if use_h2c:
                    status, body = await get_h2c(
                        worker.host, worker.connect_port, worker.authority, path, authorization
                    )
                else:
                    status, body = await get_h1(
                        worker.host, worker.connect_port, worker.authority, path, authorization
                    )
            return status, body, use_h2c
        except ProtocolMismatch as exc:
            last = exc
        except TimeoutError:
            raise _Retryable(f"GET {worker.url}{path}: no answer within {timeout_s:g} s") from None
        except HttpGetError as exc:
            raise _Retryable(f"GET {worker.url}{path}: {exc}") from None
    raise _Retryable(f"GET {worker.url}{path}: neither HTTP/1.1 nor h2c answered ({last})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clip(doc: Any) -> str:
    text = json.dumps(doc)
    return text if len(text) <= 200 else text[:200] + "…"
