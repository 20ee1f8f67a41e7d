"""The etcd adapter: one gRPC channel to the cluster, the few KV calls the stores need, errors translated.

Built on ``aetcd``'s generated etcd v3 stubs (``aetcd.rpc``) rather than its high-level client:
the stores need transactions with several compares and range reads, a watch that resumes from a
given revision, and several endpoints behind one channel, which the stubs give directly.

Every call has a deadline and no ``wait_for_ready``: with the cluster unreachable a call fails at
once with ``Unavailable`` naming the endpoints (SPEC §6: the client should retry), never hangs.
etcd acknowledges a ``Txn`` only once a quorum has committed it (raft), and reads are
linearizable (the etcd default), so what this module returns is what the cluster agreed on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from aetcd import rpc  # type: ignore[import-untyped]
from grpc import aio

from controlplane.errors import ControlPlaneError, Unavailable
from controlplane.settings import Address, EtcdLocation

CALL_TIMEOUT_S = 5.0
# How long startup waits for the first connection before it gives up with a startup error.
CONNECT_TIMEOUT_S = 3.0
# Between attempts to re-establish a broken watch.
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
# etcd's default --max-txn-ops is 128; callers chunk below it.
MAX_TXN_OPS = 100
# gRPC's default receive limit is 4 MiB, which one range of contract heads passes at a few
# hundred scopes with long comments. etcd's own client allows 2 GiB; we read every
# prefix in pages (``read_all``) and allow one message this much, far above one page.
MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024
# Keys per page of ``read_all``. A page of records of the usual few KiB is well under the
# receive limit; a page that is not (etcd stores values up to --max-request-bytes, 1.5 MiB by
# default) is asked for again with half as many keys.
PAGE_KEYS = 256
# A paged read pins the revision of its first page; a compaction past it meanwhile restarts it.
MAX_READ_RESTARTS = 3
# These mean "try again later" (no leader, connection refused, out of space), not a bug of ours.
_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
}
# Generated etcd messages are untyped (aetcd ships no stubs).
Message = Any


def prefix_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with ``prefix`` (etcd's clientv3.GetPrefixRangeEnd)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def put(key: bytes, value: bytes) -> Message:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))


def delete(key: bytes) -> Message:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))


def get(key: bytes, *, range_end: bytes = b"") -> Message:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key, range_end=range_end))


def mod_revision_is(key: bytes, mod_revision: int) -> Message:
    """Compare: ``key`` was last written at ``mod_revision`` (0: the key does not exist)."""
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=mod_revision)


async def _resolve(endpoints: Sequence[Address]) -> str:
    """A gRPC target for the endpoints: pick_first tries them in order and fails over.

    One endpoint uses the DNS resolver. Several become an ``ipv4:``/``ipv6:`` address list
    (gRPC has no multi-name target), names resolved once here; IPv4 addresses are preferred
    when both families are present, as one list takes one family.
    """
    if len(endpoints) == 1:
        return str(endpoints[0])
    loop = asyncio.get_running_loop()
    v4: list[str] = []
    v6: list[str] = []
    for endpoint in endpoints:
        try:
            infos = await loop.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Unavailable(f"cannot resolve etcd endpoint {endpoint}: {exc}") from exc
        for family, _, _, _, sockaddr in infos:
            ip = str(sockaddr[0])
            if family == socket.AF_INET:
                v4.append(f"{ip}:{endpoint.port}")
            elif family == socket.AF_INET6 and ipaddress.ip_address(ip).version == 6:
                v6.append(f"[{ip}]:{endpoint.port}")
    if v4:
        return "ipv4:" + ",".join(dict.fromkeys(v4))
    return "ipv6:" + ",".join(dict.fromkeys(v6))


class _Compacted(Exception):
    """etcd compacted the revision a paged read was pinned to (``OUT_OF_RANGE``)."""


class EtcdClient:
    """A channel to one etcd cluster and the calls the stores make; ``Unavailable`` on failure."""

    def __init__(self, location: EtcdLocation) -> None:
        self.location = location
        self.endpoints = ",".join(str(e) for e in location.endpoints)
        self._channel: aio.Channel | None = None
        self._kv: Message = None
        self._watch: Message = None

    def key(self, *parts: str) -> bytes:
        """``/PREFIX/part/part...``: every key of this control plane's store lives under the prefix."""
        return "/".join(("", self.location.prefix, *parts)).encode()

    async def open(self) -> None:
        """Connect and check the cluster answers (a startup error names the endpoints if not)."""
        target = await _resolve(self.location.endpoints)
        self._channel = aio.insecure_channel(
            target,
            options=[
                ("grpc.lb_policy_name", "pick_first"),
                ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
            ],
        )
        self._kv = rpc.KVStub(self._channel)
        self._watch = rpc.WatchStub(self._channel)
        # wait_for_ready only here: the first call waits for the connection (bounded) rather
        # than failing on a channel that has not tried to connect yet. Later calls fail fast.
        try:
            await self._kv.Range(
                rpc.RangeRequest(key=self.key()), timeout=CONNECT_TIMEOUT_S, wait_for_ready=True
            )
        except aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise self.error(exc) from exc
            raise Unavailable(
                f"etcd at {self.endpoints} is unavailable (no answer within {CONNECT_TIMEOUT_S:g} s)"
            ) from exc

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(None)

    async def call(self, method: Message, request: Message) -> Message:
        """One unary call with a deadline; gRPC errors become the control plane's errors."""
        if self._channel is None:
            raise Unavailable("the etcd store is closed")
        try:
            return await method(request, timeout=CALL_TIMEOUT_S)
        except aio.AioRpcError as exc:
            raise self.error(exc) from exc

    def error(self, exc: aio.AioRpcError) -> ControlPlaneError:
        """Translate an etcd gRPC failure (the message names the endpoints, never a secret)."""
        code, details = exc.code(), exc.details() or ""
        if code in _RETRYABLE:
            return Unavailable(f"etcd at {self.endpoints} is unavailable ({code.name}: {details})")
        return ControlPlaneError(f"etcd at {self.endpoints} refused a request ({code.name}: {details})")

    async def range(
        self, key: bytes, *, range_end: bytes = b"", descending: bool = False, limit: int = 0
    ) -> Message:
        """A linearizable range read (``RangeResponse``: ``kvs``, ``header.revision``)."""
        request = rpc.RangeRequest(key=key, range_end=range_end, limit=limit)
        if descending:
            request.sort_order = rpc.RangeRequest.DESCEND
            request.sort_target = rpc.RangeRequest.KEY
        return await self.call(self._kv.Range, request)

    async def read_all(self, *ranges: tuple[bytes, bytes]) -> tuple[list[list[Message]], int]:
        """Every key of each ``(key, range_end)`` range (``b""``: the one key) at one etcd revision.

        Read in pages of at most ``PAGE_KEYS`` keys, each continuing after the last key of the
        one before and pinned to the first page's revision, so the result is one consistent
        view however large the prefix (etcd's clientv3 ``Get`` with ``WithLimit``/``WithRev``
        pages the same way). Returns the ``kvs`` of each range and that revision.
        """
        for _ in range(MAX_READ_RESTARTS):
            revision = 0
            found: list[list[Message]] = []
            try:
                for key, range_end in ranges:
                    kvs, revision = await self._read_range(key, range_end, revision)
                    found.append(kvs)
            except _Compacted:
                continue
            return found, revision
        raise Unavailable(
            f"etcd at {self.endpoints}: compacted past every read of {MAX_READ_RESTARTS}; retry"
        )

    async def _read_range(self, key: bytes, range_end: bytes, revision: int) -> tuple[list[Message], int]:
        kvs: list[Message] = []
        limit = PAGE_KEYS
        start = key
        while True:
            request = rpc.RangeRequest(key=start, range_end=range_end, limit=limit, revision=revision)
            if self._channel is None:
                raise Unavailable("the etcd store is closed")
            try:
                response = await self._kv.Range(request, timeout=CALL_TIMEOUT_S)
            except aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and limit > 1:
                    limit //= 2  # this page is past the receive limit: fewer keys per page
                    continue
                if exc.code() == grpc.StatusCode.OUT_OF_RANGE and revision:
                    raise _Compacted from exc
                raise self.error(exc) from exc
            revision = revision or int(response.header.revision)
            kvs += response.kvs
            if not response.more or not response.kvs or not range_end:
                return kvs, revision
            start = response.kvs[-1].key + b"\0"  # the next key after the last one read

    async def txn(
        self, compare: Sequence[Message], success: Sequence[Message], failure: Sequence[Message] = ()
    ) -> Message:
        """One atomic transaction (``TxnResponse``: ``succeeded``, ``responses``, ``header``).

        Acknowledged by etcd once a quorum committed it; a failed compare writes nothing.
        """
        request = rpc.TxnRequest(compare=list(compare), success=list(success), failure=list(failure))
        return await self.call(self._kv.Txn, request)

    async def read(self, *ops: Message) -> list[list[Message]]:
        """Several range reads at one revision (a compare-less ``Txn``): the ``kvs`` of each."""
        response = await self.txn((), ops)
        return [list(r.response_range.kvs) for r in response.responses]

    async def watch(self, key: bytes, range_end: bytes, start_revision: int) -> AsyncIterator[Message]:
        """``WatchResponse`` messages for the range from ``start_revision`` on, until the stream ends.

        Raises ``Unavailable`` when the stream breaks or etcd cancels the watch (e.g. the start
        revision was compacted); the caller resynchronises and watches again.
        """
        if self._channel is None:
            raise Unavailable("the etcd store is closed")
        # fragment: etcd splits a response past its --max-request-bytes into several (in event
        # order, so a transaction's counter still comes after its head), each under our limit.
        create = rpc.WatchCreateRequest(
            key=key, range_end=range_end, start_revision=start_revision, fragment=True
        )
        call = self._watch.Watch()
        try:
            await call.write(rpc.WatchRequest(create_request=create))
            async for response in call:
                if response.canceled or response.compact_revision:
                    reason = response.cancel_reason or f"compacted at {response.compact_revision}"
                    raise Unavailable(f"etcd at {self.endpoints} cancelled the watch ({reason})")
                yield response
        except aio.AioRpcError as exc:
            raise self.error(exc) from exc
        finally:
            call.cancel()
        raise Unavailable(f"etcd at {self.endpoints} ended the watch")

    async def changes(self, prefix: bytes) -> AsyncIterator[None]:
        """Yield once at once, then after every change under ``prefix``; never ends until closed.

        For state each control plane re-reads when another one changes it (the worker registry,
        router stats). After a broken watch it yields again once etcd answers (a change may have
        been missed meanwhile), backing off while it does not.
        """
        attempt = 0
        while True:
            try:
                response = await self.call(
                    self._kv.Range,
                    rpc.RangeRequest(key=prefix, range_end=prefix_end(prefix), count_only=True),
                )
                yield None
                async for event in self.watch(prefix, prefix_end(prefix), int(response.header.revision) + 1):
                    attempt = 0
                    if event.events:
                        yield None
            except ControlPlaneError:  # etcd away or refusing: wait, then read again and re-watch
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
