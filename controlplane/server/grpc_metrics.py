"""gRPC server metrics: every call counted by method and status code, and timed.

The names and labels are go-grpc-prometheus's (also py-grpc-prometheus's), which stock gRPC
dashboards and alerts already read: ``grpc_server_handled_total`` and the histogram
``grpc_server_handling_seconds``, by ``grpc_type`` (unary, client_stream, server_stream,
bidi_stream), ``grpc_service``, ``grpc_method`` and ``grpc_code``. The interceptor is the
outermost one, so refused calls (UNAUTHENTICATED, PERMISSION_DENIED) are counted too; a stream
is timed from its start to its end.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from grpc import aio
from prometheus_client import Counter, Histogram

_Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]]"
)

HANDLED = Counter(
    "grpc_server_handled_total",
    "gRPC calls completed on the server, by method and status code",
    ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
)
HANDLING = Histogram(
    "grpc_server_handling_seconds",
    "Time from a gRPC call's start to its end (streams: their whole life), by method and status code",
    ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0, 3600.0),
)


def _code(context: aio.ServicerContext[Any, Any], failed: BaseException | None) -> str:
    """The call's status: the one the servicer or an interceptor set (abort), else OK for a
    call that returned, CANCELLED for one the client left (the task is cancelled), UNKNOWN."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if failed is None:
        return "OK"
    return "CANCELLED" if not isinstance(failed, Exception) else "UNKNOWN"


class MetricsInterceptor(aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts and times every call it lets through (all of them)."""

    async def intercept_service(  # type: ignore[override]  # None: unknown method
        self, continuation: _Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        return _timed(handler, service, method)


def _timed(
    handler: grpc.RpcMethodHandler[Any, Any], service: str, method: str
) -> grpc.RpcMethodHandler[Any, Any]:
    behaviour: Any
    build: Callable[..., grpc.RpcMethodHandler[Any, Any]]
    if handler.unary_unary is not None:
        kind, behaviour, build, streams = (
            "unary",
            handler.unary_unary,
            grpc.unary_unary_rpc_method_handler,
            False,
        )
    elif handler.unary_stream is not None:
        kind, behaviour, build, streams = (
            "server_stream",
            handler.unary_stream,
            grpc.unary_stream_rpc_method_handler,
            True,
        )
    elif handler.stream_unary is not None:
        kind, behaviour, build, streams = (
            "client_stream",
            handler.stream_unary,
            grpc.stream_unary_rpc_method_handler,
            False,
        )
    else:
        assert handler.stream_stream is not None
        kind, behaviour, build, streams = (
            "bidi_stream",
            handler.stream_stream,
            grpc.stream_stream_rpc_method_handler,
            True,
        )

    def done(context: aio.ServicerContext[Any, Any], started: float, failed: BaseException | None) -> None:
        code = _code(context, failed)
        HANDLED.labels(kind, service, method, code).inc()
        HANDLING.labels(kind, service, method, code).observe(time.perf_counter() - started)

    async def answer(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        started = time.perf_counter()
        try:
            result = await behaviour(request, context)
        except BaseException as exc:
            done(context, started, exc)
            raise
        done(context, started, None)
        return result

    async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        started = time.perf_counter()
        try:
            result = behaviour(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:  # a coroutine that writes with context.write()
                await result
        except BaseException as exc:
            done(context, started, exc)
            raise
        done(context, started, None)

    return build(stream if streams else answer, handler.request_deserializer, handler.response_serializer)
