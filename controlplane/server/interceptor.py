"""The server interceptor: authenticate, authorise, and map errors, for every service.

Every method handler is wrapped once per call: the caller's ``Principal`` is set in a context
variable for the servicer (the author of a change), and any exception the servicer raises is
turned into a status by ``status_for`` -- so every service (contracts, loads, routers, and any
new one) gets auth and the error mapping without code of its own. A refused token is answered
the same way, as ``Unauthenticated``/``PermissionDenied`` through ``status_for`` (SPEC §6 Auth).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeAlias

import grpc
from grpc import aio

from controlplane.errors import PermissionDenied, Unauthenticated
from controlplane.server.auth import (
    ANONYMOUS,
    CURRENT_PRINCIPAL,
    Principal,
    TokenTable,
    allows,
    bearer_token,
    is_open,
    split_method,
)
from controlplane.server.errors import status_for

_Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]]"
)


async def _abort(context: aio.ServicerContext[Any, Any], exc: Exception) -> NoReturn:
    if isinstance(exc, aio.AbortError):  # context.abort() already chose the status
        raise exc
    code, message = status_for(exc)
    await context.abort(code, message)
    raise AssertionError("unreachable: abort raises")


def _metadata_value(details: grpc.HandlerCallDetails, key: str) -> str | None:
    for item_key, value in details.invocation_metadata or ():
        if item_key == key:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


def _shape(
    handler: grpc.RpcMethodHandler[Any, Any],
) -> tuple[Any, Callable[..., grpc.RpcMethodHandler[Any, Any]], bool]:
    """The handler's behaviour, the factory of handlers of its shape, and whether it streams answers."""
    if handler.unary_unary is not None:
        return handler.unary_unary, grpc.unary_unary_rpc_method_handler, False
    if handler.unary_stream is not None:
        return handler.unary_stream, grpc.unary_stream_rpc_method_handler, True
    if handler.stream_unary is not None:
        return handler.stream_unary, grpc.stream_unary_rpc_method_handler, False
    assert handler.stream_stream is not None
    return handler.stream_stream, grpc.stream_stream_rpc_method_handler, True


def _wrap(handler: grpc.RpcMethodHandler[Any, Any], principal: Principal) -> grpc.RpcMethodHandler[Any, Any]:
    """The same handler, with the principal set and errors mapped around its behaviour."""
    behaviour, build, streams = _shape(handler)

    # ``request`` is the request message, or the request iterator for client-streaming methods.
    async def answer(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        CURRENT_PRINCIPAL.set(principal)
        try:
            return await behaviour(request, context)
        except Exception as exc:
            await _abort(context, exc)

    async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        CURRENT_PRINCIPAL.set(principal)
        try:
            result = behaviour(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:  # a coroutine that writes with context.write()
                await result
        except Exception as exc:
            await _abort(context, exc)

    return build(stream if streams else answer, handler.request_deserializer, handler.response_serializer)


def _denied(
    handler: grpc.RpcMethodHandler[Any, Any], refusal: Unauthenticated | PermissionDenied
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same shape that only answers ``refusal`` (its status via ``status_for``)."""

    async def deny(_request: Any, context: aio.ServicerContext[Any, Any]) -> NoReturn:
        await _abort(context, refusal)

    _, build, _ = _shape(handler)
    return build(deny, handler.request_deserializer, handler.response_serializer)


class ServiceInterceptor(aio.ServerInterceptor):  # type: ignore[type-arg]
    """Bearer-token auth (``tokens`` None: everyone is ``anonymous``) plus the error mapping."""

    def __init__(self, tokens: TokenTable | None) -> None:
        self._tokens = tokens

    async def intercept_service(  # type: ignore[override]  # None: unknown method (UNIMPLEMENTED)
        self, continuation: _Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or is_open(method):
            return handler
        if self._tokens is None:
            return _wrap(handler, ANONYMOUS)
        token = bearer_token(_metadata_value(handler_call_details, "authorization"))
        if token is None:
            return _denied(
                handler,
                Unauthenticated("missing bearer token: send metadata 'authorization: Bearer <token>'"),
            )
        principal = self._tokens.lookup(token)
        if principal is None:
            return _denied(handler, Unauthenticated("unknown bearer token"))
        if not allows(principal.role, method):
            return _denied(
                handler,
                PermissionDenied(
                    f"token {principal.name!r} (role {principal.role.value}) may not call "
                    f"{split_method(method)[1]}"
                ),
            )
        return _wrap(handler, principal)
