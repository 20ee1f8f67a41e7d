"""The shared store: contracts in etcd, several control planes on one cluster (SPEC §3.2, §6).

Keys under ``/PREFIX/contracts/``::

    revision              the store-wide revision, a decimal counter
    head/SCOPE            the newest version of SCOPE (a deletion included), JSON
    history/SCOPE/V       every version, V zero-padded so keys sort by version, JSON

(SCOPE percent-encoded, so a ``/`` in a model name cannot reach into another scope's keys.)

Every change is one etcd transaction that compares the revision key's ``mod_revision`` with the
one read, and puts the version, the head and revision + 1. Any change through any control plane
moves that key, so of two concurrent writers exactly one commits and the other re-reads and
retries (or, with ``expected_version``, gets ``ABORTED``): versions and revisions are never
duplicated or skipped, and the revision is the same on every replica because it lives in etcd. A
write is acknowledged once etcd acknowledges the transaction, i.e. once a quorum has it.

Every control plane keeps the live set in memory from a watch on the prefix, so a change through
one reaches the ``WatchContracts`` clients of all (SPEC §6). The watch is resumed after a break by
re-reading the whole set at one etcd revision (in pages: it may be larger than one gRPC message)
and watching from the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import structlog

from controlplane.contracts import SamplingContract, contract_to_json, parse_contract_json
from controlplane.errors import NotFound, Unavailable
from controlplane.settings import EtcdLocation
from controlplane.store import changes
from controlplane.store.etcd_client import (
    BACKOFF_S,
    EtcdClient,
    Message,
    get,
    mod_revision_is,
    prefix_end,
    put,
)
from controlplane.store.model import ChangeKind, ContractVersion, HistoryPage, Snapshot
from controlplane.store.published import PublishedSnapshots

log = structlog.get_logger(__name__)

# Another control plane committing between our read and our transaction costs one retry; this
# many in a row means something is wrong (or a runaway writer), not ordinary contention.
MAX_WRITE_ATTEMPTS = 32
# How long a writer waits for its own change to come back on the watch before answering anyway
# (the change is committed either way; this only keeps read-your-writes in the common case).
OWN_WRITE_VISIBLE_S = 2.0
EVENT_PUT = 0  # mvccpb.Event.EventType
# What a write makes of (head, rollback target), from ``changes.py``; raises to write nothing.
Decide = Callable[[ContractVersion | None, ContractVersion | None], changes.Change]


def _scope_key(scope: str) -> str:
    return quote(scope, safe="")


def encode_version(v: ContractVersion) -> bytes:
    return json.dumps(
        {
            "scope": v.scope,
            "version": v.version,
            "revision": v.revision,
            "change": v.change.value,
            "params": None if v.contract is None else contract_to_json(v.contract),
            "conflict": None if v.contract is None else v.contract.conflict.value,
            "author": v.author,
            "create_time_us": v.create_time_us,
            "comment": v.comment,
            "rolled_back_from_version": v.rolled_back_from_version,
        },
        separators=(",", ":"),
    ).encode()


def decode_version(raw: bytes) -> ContractVersion:
    doc: dict[str, Any] = json.loads(raw)
    params = doc["params"]
    contract = None if params is None else parse_contract_json(params, doc["conflict"] or "reject")
    return ContractVersion(
        scope=str(doc["scope"]),
        version=int(doc["version"]),
        revision=int(doc["revision"]),
        change=ChangeKind(doc["change"]),
        contract=contract,
        author=str(doc["author"]),
        create_time_us=int(doc["create_time_us"]),
        comment=str(doc["comment"]),
        rolled_back_from_version=int(doc["rolled_back_from_version"]),
    )


class EtcdStore(PublishedSnapshots):
    """``Store`` on etcd; ``client`` is shared with the worker registry and router stats."""

    def __init__(self, location: EtcdLocation) -> None:
        super().__init__()
        self.client = EtcdClient(location)
        self._revision_key = self.client.key("contracts", "revision")
        self._heads_prefix = self.client.key("contracts", "head", "")
        self._watch_prefix = self.client.key("contracts", "")
        self._heads: dict[str, ContractVersion] = {}
        self._watcher: asyncio.Task[None] | None = None

    async def open(self) -> None:
        await self.client.open()
        etcd_revision = await self._resync()
        self._watcher = asyncio.create_task(self._follow(etcd_revision), name="etcd-contract-watch")

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await self.client.close()

    async def update(
        self,
        scope: str,
        contract: SamplingContract,
        *,
        expected_version: int | None,
        allow_missing: bool,
        author: str,
        comment: str,
    ) -> ContractVersion:
        def decide(head: ContractVersion | None, _: ContractVersion | None) -> changes.Change:
            return changes.update(
                scope, head, contract, expected_version=expected_version, allow_missing=allow_missing
            )

        return await self._write(scope, None, decide, author, comment)

    async def delete(
        self, scope: str, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion:
        def decide(head: ContractVersion | None, _: ContractVersion | None) -> changes.Change:
            return changes.delete(scope, head, expected_version=expected_version)

        return await self._write(scope, None, decide, author, comment)

    async def rollback(
        self, scope: str, version: int, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion:
        changes.check_rollback_version(version)

        def decide(head: ContractVersion | None, target: ContractVersion | None) -> changes.Change:
            return changes.rollback(scope, version, head, target, expected_version=expected_version)

        return await self._write(scope, version, decide, author, comment)

    async def history(self, scope: str, *, page_size: int, before_version: int | None) -> HistoryPage:
        prefix = self._history_key(scope, None)
        end = (
            prefix_end(prefix) if before_version is None else self._history_key(scope, max(before_version, 0))
        )
        response = await self.client.range(prefix, range_end=end, descending=True, limit=page_size + 1)
        if not response.kvs and before_version is None:
            raise NotFound(f"scope {scope!r} has no history", field="scope")
        versions = tuple(decode_version(kv.value) for kv in list(response.kvs)[:page_size])
        more = len(response.kvs) > page_size
        return HistoryPage(versions, versions[-1].version if more else None)

    # -- writes ----------------------------------------------------------------------------

    def _history_key(self, scope: str, version: int | None) -> bytes:
        if version is None:
            return self.client.key("contracts", "history", _scope_key(scope), "")
        return self.client.key("contracts", "history", _scope_key(scope), f"{version:020d}")

    async def _write(
        self, scope: str, target_version: int | None, decide: Decide, author: str, comment: str
    ) -> ContractVersion:
        # Shielded: a client that cancels mid-write must not leave a committed change unpublished.
        return await asyncio.shield(self._commit(scope, target_version, decide, author, comment))

    async def _commit(
        self, scope: str, target_version: int | None, decide: Decide, author: str, comment: str
    ) -> ContractVersion:
        head_key = self.client.key("contracts", "head", _scope_key(scope))
        reads = [get(self._revision_key), get(head_key)]
        if target_version is not None:
            reads.append(get(self._history_key(scope, target_version)))
        for _ in range(MAX_WRITE_ATTEMPTS):
            counter, head_kvs, *rest = await self.client.read(*reads)
            revision_mod = counter[0].mod_revision if counter else 0
            revision = int(counter[0].value) if counter else 0
            head = decode_version(head_kvs[0].value) if head_kvs else None
            target = decode_version(rest[0][0].value) if rest and rest[0] else None
            written = decide(head, target).written(
                revision=revision + 1, author=author, comment=comment, create_time_us=time.time_ns() // 1000
            )
            record = encode_version(written)
            # The counter goes last: a watcher publishes a revision once it has seen its counter,
            # by which time the head of the same transaction has been applied.
            response = await self.client.txn(
                [mod_revision_is(self._revision_key, revision_mod)],
                [
                    put(self._history_key(scope, written.version), record),
                    put(head_key, record),
                    put(self._revision_key, str(written.revision).encode()),
                ],
            )
            if response.succeeded:
                await self._await_visible(written)
                return written
        raise Unavailable(
            f"scope {scope!r}: gave up after {MAX_WRITE_ATTEMPTS} attempts, every one overtaken by "
            "another writer; retry"
        )

    async def _await_visible(self, written: ContractVersion) -> None:
        """Publish our own change at once when it is the next revision, else wait for the watch."""
        if written.revision == self._published.revision + 1:
            self._apply([written], written.revision)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wait_for_change(written.revision - 1), OWN_WRITE_VISIBLE_S)

    # -- the watch -------------------------------------------------------------------------

    def _apply(self, versions: Sequence[ContractVersion], revision: int) -> None:
        """Take versions and the counter in etcd order; publish once the counter moved on."""
        for v in versions:
            old = self._heads.get(v.scope)
            if old is None or v.revision > old.revision:
                self._heads[v.scope] = v
        if revision > self._published.revision:
            self._publish(Snapshot.of(revision, list(self._heads.values())))

    async def _resync(self) -> int:
        """Read the counter and every head at one etcd revision; returns that revision."""
        # Paged: the heads of a large store do not fit one gRPC message (issue 13).
        (counter, head_kvs), etcd_revision = await self.client.read_all(
            (self._revision_key, b""), (self._heads_prefix, prefix_end(self._heads_prefix))
        )
        heads = [decode_version(kv.value) for kv in head_kvs]
        revision = int(counter[0].value) if counter else 0
        if revision < self._published.revision:
            log.warning(
                "etcd_store_revision_went_back",
                store=str(self.client.location),
                revision=revision,
                known=self._published.revision,
            )
        self._heads = {v.scope: v for v in heads}
        self._apply([], revision)
        return etcd_revision

    async def _follow(self, etcd_revision: int) -> None:
        """Apply the watch's events until cancelled; on a break, back off, resync and watch again."""
        attempt = 0
        while True:
            try:
                async for response in self.client.watch(
                    self._watch_prefix, prefix_end(self._watch_prefix), etcd_revision + 1
                ):
                    self._take(response)
                    etcd_revision = max(etcd_revision, int(response.header.revision))
                    attempt = 0
            except Exception as exc:
                # Broad on purpose: this task is what keeps every watcher of this plane current,
                # so it must outlive anything (etcd away, a record it cannot read) and retry.
                delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                if attempt == 0:
                    log.warning("etcd_watch_broken", store=str(self.client.location), error=str(exc))
                attempt += 1
                await asyncio.sleep(delay)
                with contextlib.suppress(Exception):
                    etcd_revision = await self._resync()
                    log.info("etcd_watch_resumed", store=str(self.client.location))

    def _take(self, response: Message) -> None:
        # Only puts: nothing of ours deletes a contract key (a deletion is a version).
        puts = [e.kv for e in response.events if e.type == EVENT_PUT]
        counters = [int(kv.value) for kv in puts if kv.key == self._revision_key]
        heads = [decode_version(kv.value) for kv in puts if kv.key.startswith(self._heads_prefix)]
        self._apply(heads, max(counters, default=self._published.revision))
