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

from controlplane.errors import PermissionDenied, Unauthenticated, UndecodableRequest
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


class _Undecodable:
    """What a request message that does not parse decodes to, so that the call can refuse it."""

    __slots__ = ("refusal",)

    def __init__(self, type_name: str) -> None:
        self.refusal = UndecodableRequest(f"cannot parse the request as {type_name}")


def _decoding(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, returning ``_Undecodable`` where it raises.

    grpcio answers a deserializer's exception itself, as UNKNOWN with the Python class in the
    message ("Unexpected <class 'google.protobuf.message.DecodeError'>"); the call then refuses
    it as ``status_for`` says. INTERNAL, because that is what stock gRPC servers answer for a
    request that does not parse (grpc-go "grpc: error unmarshalling request", grpc-java
    "Invalid protobuf byte sequence"): the bytes are not a message of the method at all, which
    is a broken client or transport, not a field a caller could correct.
    """
    if deserializer is None:
        return None
    message_type = getattr(deserializer, "__self__", None)
    descriptor = getattr(message_type, "DESCRIPTOR", None)
    type_name = str(getattr(descriptor, "full_name", "the method's request message"))

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError, or anything a parser raises on hostile bytes
            return _Undecodable(type_name)

    return decode


def _refusing_undecodable(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """The same handler, answering a request that does not parse before its behaviour runs."""
    behaviour, build, _ = _shape(handler)

    async def checked(
        requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Undecodable):
                await _abort(context, request.refusal)
            yield request

    def arguments(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        if handler.request_streaming:
            return checked(request, context)
        return request

    if inspect.isasyncgenfunction(behaviour):

        async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await _abort(context, request.refusal)
            async for item in behaviour(arguments(request, context), context):
                yield item

        wrapped: Any = stream
    else:

        async def answer(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                await _abort(context, request.refusal)
            return await behaviour(arguments(request, context), context)

        wrapped = answer
    return build(wrapped, _decoding(handler.request_deserializer), handler.response_serializer)


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
        if handler is None:
            return None
        handler = _refusing_undecodable(handler)
        if is_open(method):
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
