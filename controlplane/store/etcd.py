"""The shared store: contracts in etcd, several control planes on one cluster (SPEC §3.2, §6).

Keys under ``/PREFIX/contracts/``::

    revision              the store-wide revision, a decimal counter
    head/SCOPE            the newest version of SCOPE (a deletion included), JSON
    history/SCOPE/V       every version, V zero-padded so keys sort by version, JSON

(SCOPE percent-encoded, so a ``/`` in a model name cannot reach into another scope's keys.)

Every transaction compares the revision key's ``mod_revision`` with the one read, and puts each
version, its head and the counter at the last revision. Any change through any control plane
moves that key, so of two concurrent transactions exactly one commits and the other re-reads and
retries after a jittered backoff (or, with ``expected_version``, gets ``ABORTED``): versions and
revisions are never duplicated or skipped, and the revision is the same on every replica because
it lives in etcd. The writes of one control plane queue behind its transaction in flight and go
into the next one together (group commit), numbered in queue order, so they never contend with
each other. A write is acknowledged once etcd acknowledges its transaction, i.e. once a quorum
has it.

Every control plane keeps the live set in memory from a watch on the prefix, so a change through
one reaches the ``WatchContracts`` clients of all (SPEC §6). The watch is resumed after a break by
re-reading the whole set at one etcd revision (in pages: it may be larger than one gRPC message)
and watching from the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

# Writes queued while a transaction is in flight go into the next one together (group commit):
# the writers of one control plane never contend with each other on the revision key (16 of them
# lost writes when each compare-and-swapped it alone), and one etcd round trip (one raft commit,
# one fsync) carries many. Each write takes two reads (head, rollback target) and two puts, plus
# the counter: under etcd's default --max-txn-ops (128).
MAX_BATCH_WRITES = 40
# Record bytes per transaction, under etcd's default --max-request-bytes (1.5 MiB).
MAX_BATCH_BYTES = 1024 * 1024
# Other control planes committing between our read and our transaction cost a retry, after a
# jittered backoff, for this long (below the CLI's 10 s deadline, so the client hears why).
WRITE_DEADLINE_S = 8.0
RETRY_FIRST_S = 0.002
RETRY_SPREAD_S = 0.01
# How long a writer waits for its own change to come back on the watch before answering anyway
# (the change is committed either way; this only keeps read-your-writes in the common case).
OWN_WRITE_VISIBLE_S = 2.0
EVENT_PUT = 0  # mvccpb.Event.EventType
# What a write makes of (head, rollback target), from ``changes.py``; raises to write nothing.
Decide = Callable[[ContractVersion | None, ContractVersion | None], changes.Change]


@dataclass(slots=True)
class _Write:
    """A queued contract write and the future its caller awaits."""

    scope: str
    target_version: int | None
    decide: Decide
    author: str
    comment: str
    done: asyncio.Future[ContractVersion]

    def succeed(self, written: ContractVersion) -> None:
        if not self.done.done():
            self.done.set_result(written)

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


@dataclass(frozen=True, slots=True)
class _State:
    """The store as a batch's reads found it."""

    revision_mod: int
    revision: int
    heads: dict[str, ContractVersion]
    targets: dict[tuple[str, int], ContractVersion]


def _scopes(batch: list[_Write]) -> list[str]:
    return list(dict.fromkeys(w.scope for w in batch))


def _targets(batch: list[_Write]) -> list[tuple[str, int]]:
    return list(dict.fromkeys((w.scope, w.target_version) for w in batch if w.target_version is not None))


def retry_delay_s(attempt: int) -> float:
    """How long a writer overtaken ``attempt + 1`` times in a row waits before it tries again.

    Jittered, so contending control planes spread out instead of colliding again in step; short
    at first (an occasional collision costs about a millisecond), then shorter the more often a
    writer lost, so the writers that waited longest go first. With exponential growth (full
    jitter) fresh writers kept overtaking the ones that had lost most: 16 control planes writing
    flat out had a p99 of 3.2 s (max 3.6 s), against 0.43 s (max 0.48 s) this way
    (bench/README.md, etcd writes).
    """
    if attempt == 0:
        return random.uniform(0, RETRY_FIRST_S)
    return random.uniform(0, RETRY_SPREAD_S / attempt)


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
        self._pending: deque[_Write] = deque()
        self._committer: asyncio.Task[None] | None = None

    async def open(self) -> None:
        await self.client.open()
        etcd_revision = await self._resync()
        self._watcher = asyncio.create_task(self._follow(etcd_revision), name="etcd-contract-watch")

    async def close(self) -> None:
        committer = self._committer
        if committer is not None:
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer
        for write in self._pending:
            write.fail(Unavailable("the etcd store is closed"))
        self._pending.clear()
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

    def _head_key(self, scope: str) -> bytes:
        return self.client.key("contracts", "head", _scope_key(scope))

    def _history_key(self, scope: str, version: int | None) -> bytes:
        if version is None:
            return self.client.key("contracts", "history", _scope_key(scope), "")
        return self.client.key("contracts", "history", _scope_key(scope), f"{version:020d}")

    async def _write(
        self, scope: str, target_version: int | None, decide: Decide, author: str, comment: str
    ) -> ContractVersion:
        write = _Write(
            scope, target_version, decide, author, comment, asyncio.get_running_loop().create_future()
        )
        self._pending.append(write)
        if self._committer is None:
            self._committer = asyncio.create_task(self._commit_pending(), name="etcd-contract-commit")
        # Shielded: the committer settles the write whether or not its client still waits, so a
        # client that cancels mid-write cannot leave a committed change unpublished.
        return await asyncio.shield(write.done)

    async def _commit_pending(self) -> None:
        """Commit the queued writes, up to ``MAX_BATCH_WRITES`` per transaction, until none is left."""
        try:
            while self._pending:
                batch = [self._pending.popleft() for _ in range(min(MAX_BATCH_WRITES, len(self._pending)))]
                try:
                    await self._commit_batch(batch)
                except asyncio.CancelledError:  # close(): in flight, so perhaps committed
                    for write in batch:
                        write.fail(Unavailable("the etcd store closed during the write; it may be committed"))
                    raise
                except Exception as exc:  # etcd away, out of time, or a bug: each write of the batch hears it
                    for write in batch:
                        write.fail(exc)
        finally:
            self._committer = None

    async def _commit_batch(self, batch: list[_Write]) -> None:
        """Decide and commit ``batch`` in one transaction, re-reading while other control planes overtake it.

        The writes are decided in queue order against the state read plus the writes before them
        in the batch, and numbered with consecutive revisions: the same history as committing
        them one by one. A refusal is final only with the transaction that makes it true (or
        when nothing is left to commit); overtaken, every write is decided again.
        """
        deadline = time.monotonic() + WRITE_DEADLINE_S
        state = self._state(batch, await self.client.read(*self._reads_for(batch)))
        for attempt in itertools.count():
            revision, heads, targets = state.revision, state.heads, state.targets
            decided: list[tuple[_Write, ContractVersion]] = []
            refused: list[tuple[_Write, Exception]] = []
            history: list[Message] = []
            latest: dict[str, bytes] = {}
            size = 0
            for index, write in enumerate(batch):
                target = (
                    None if write.target_version is None else targets.get((write.scope, write.target_version))
                )
                try:
                    change = write.decide(heads.get(write.scope), target)
                except Exception as exc:  # refused (ABORTED, NOT_FOUND, ...): this write only
                    refused.append((write, exc))
                    continue
                written = change.written(
                    revision=revision + len(decided) + 1,
                    author=write.author,
                    comment=write.comment,
                    create_time_us=time.time_ns() // 1000,
                )
                record = encode_version(written)
                if decided and size + 2 * len(record) > MAX_BATCH_BYTES:
                    # The rest goes into the next transaction (decided again then), in order.
                    self._pending.extendleft(reversed(batch[index:]))
                    del batch[index:]
                    break
                size += 2 * len(record)
                heads[write.scope] = written
                targets[(write.scope, written.version)] = written
                history.append(put(self._history_key(write.scope, written.version), record))
                latest[write.scope] = record  # etcd refuses a key put twice in one transaction
                decided.append((write, written))
            if not decided:
                for write, refusal in refused:
                    write.fail(refusal)
                return
            last = decided[-1][1].revision
            # The counter goes last: a watcher publishes a revision once it has seen its counter,
            # by which time the heads of the same transaction have been applied.
            # Overtaken, the transaction reads instead what the next attempt is decided on
            # (one round trip less per retry).
            response = await self.client.txn(
                [mod_revision_is(self._revision_key, state.revision_mod)],
                [
                    *history,
                    *(put(self._head_key(scope), record) for scope, record in latest.items()),
                    put(self._revision_key, str(last).encode()),
                ],
                self._reads_for(batch),
            )
            if response.succeeded:
                await self._await_visible([written for _, written in decided])
                for write, refusal in refused:
                    write.fail(refusal)
                for write, written in decided:
                    write.succeed(written)
                return
            state = self._state(batch, [list(r.response_range.kvs) for r in response.responses])
            # Another control plane committed between our read and our transaction.
            delay = retry_delay_s(attempt)
            if time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
        scopes = ", ".join(sorted({repr(w.scope) for w in batch}))
        raise Unavailable(
            f"scope {scopes}: overtaken by other control planes' writes for {WRITE_DEADLINE_S:g} s; retry"
        )

    def _reads_for(self, batch: list[_Write]) -> list[Message]:
        """The reads a batch is decided on: the counter, each scope's head, each rollback target."""
        return [
            get(self._revision_key),
            *(get(self._head_key(scope)) for scope in _scopes(batch)),
            *(get(self._history_key(scope, version)) for scope, version in _targets(batch)),
        ]

    def _state(self, batch: list[_Write], found: list[list[Message]]) -> _State:
        """What ``_reads_for(batch)`` found: the counter's mod_revision and value, heads, targets."""
        scopes, targets = _scopes(batch), _targets(batch)
        counter, heads, wanted = found[0], found[1 : 1 + len(scopes)], found[1 + len(scopes) :]
        return _State(
            revision_mod=int(counter[0].mod_revision) if counter else 0,
            revision=int(counter[0].value) if counter else 0,
            heads={s: decode_version(kvs[0].value) for s, kvs in zip(scopes, heads, strict=True) if kvs},
            targets={t: decode_version(kvs[0].value) for t, kvs in zip(targets, wanted, strict=True) if kvs},
        )

    async def _await_visible(self, written: list[ContractVersion]) -> None:
        """Publish our own changes at once when they are the next revisions, else wait for the watch."""
        if written[0].revision == self._published.revision + 1:
            self._apply(written, written[-1].revision)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wait_for_change(written[-1].revision - 1), OWN_WRITE_VISIBLE_S)

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
        # Paged: the heads of a large store do not fit one gRPC message.
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
