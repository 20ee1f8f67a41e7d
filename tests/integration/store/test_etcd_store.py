"""EtcdStore on a real etcd: reopening keeps everything, refused writes leave no key and burn no
revision, a cancelled writer still publishes (the SQLite store's guarantees, SPEC §3.2, §6)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from controlplane.contracts import parse_contract_json
from controlplane.errors import NotFound, VersionMismatch
from controlplane.settings import Address, EtcdLocation, parse_store
from controlplane.store.etcd import EtcdStore
from controlplane.store.etcd_client import MAX_TXN_OPS, PAGE_KEYS, prefix_end, put

C1 = parse_contract_json('{"temperature": 1}')
C2 = parse_contract_json('{"top_k": {"min": 1, "max": 8, "default": 4}}', "reject")


def _location(url: str) -> EtcdLocation:
    location = parse_store(url)
    assert isinstance(location, EtcdLocation)
    return location


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EtcdStore]:
    """An open EtcdStore on this test's prefix."""
    opened = EtcdStore(_location(store_url))
    await opened.open()
    yield opened
    await opened.close()


async def test_reopening_restores_the_live_set_and_continues_revisions(store_url: str, store: EtcdStore):
    """A new store on the same prefix has the same snapshot and writes the next revision."""
    await store.update("*", C1, expected_version=None, allow_missing=True, author="a", comment="x")
    await store.update("m", C2, expected_version=None, allow_missing=True, author="b", comment="y")
    await store.delete("*", expected_version=1, author="a", comment="")
    reopened = EtcdStore(_location(store_url))
    await reopened.open()
    try:
        after = reopened.snapshot()
        assert after.revision == 3 and list(after.contracts) == ["m"]
        assert after.contracts["m"] == store.snapshot().contracts["m"]
        written = await reopened.update(
            "*", C1, expected_version=2, allow_missing=True, author="a", comment=""
        )
        assert (written.version, written.revision) == (3, 4)
    finally:
        await reopened.close()


async def test_refused_writes_leave_no_key_and_burn_no_revision(store: EtcdStore):
    """ABORTED and NOT_FOUND writes change nothing in etcd, so the next write takes the next revision."""
    await store.update("*", C1, expected_version=0, allow_missing=True, author="a", comment="")
    prefix = store.client.key("")
    before = [kv.key for kv in (await store.client.range(prefix, range_end=prefix_end(prefix))).kvs]
    with pytest.raises(VersionMismatch):
        await store.update("*", C1, expected_version=0, allow_missing=True, author="a", comment="")
    with pytest.raises(NotFound):
        await store.update("m", C1, expected_version=None, allow_missing=False, author="a", comment="")
    with pytest.raises(NotFound):
        await store.rollback("*", 7, expected_version=None, author="a", comment="")
    after = [kv.key for kv in (await store.client.range(prefix, range_end=prefix_end(prefix))).kvs]
    assert after == before
    written = await store.update("m", C1, expected_version=None, allow_missing=True, author="a", comment="")
    assert written.revision == 2


async def test_a_cancelled_writer_still_publishes_its_committed_change(store: EtcdStore):
    """Cancelling the caller mid-write cannot leave a committed version invisible to watchers."""
    task = asyncio.create_task(
        store.update("*", C1, expected_version=None, allow_missing=True, author="a", comment="")
    )
    await asyncio.sleep(0)
    task.cancel()
    snapshot = await asyncio.wait_for(store.wait_for_change(0), 5)
    assert snapshot.revision == 1 and "*" in snapshot.contracts


async def test_an_endpoint_list_fails_over_past_a_dead_endpoint(store_url: str):
    """etcd://DEAD,LIVE/prefix: the store connects through the endpoint that answers."""
    location = _location(store_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = Address("127.0.0.1", int(s.getsockname()[1]))
    listed = EtcdStore(EtcdLocation((dead, *location.endpoints), location.prefix))
    await listed.open()
    try:
        written = await listed.update("*", C1, expected_version=0, allow_missing=True, author="a", comment="")
        assert written.revision == 1
    finally:
        await listed.close()


async def test_a_paged_read_returns_every_key_once_at_the_revision_of_its_first_page(store: EtcdStore):
    """read_all over several pages: every key once, in order; a write made between pages is not in it."""
    prefix = store.client.key("paged", "")
    keys = [prefix + f"{i:04d}".encode() for i in range(2 * PAGE_KEYS + 7)]
    for start in range(0, len(keys), MAX_TXN_OPS):
        await store.client.txn((), [put(k, b"v1") for k in keys[start : start + MAX_TXN_OPS]])
    original = store.client._kv.Range
    pages = 0

    async def range_then_write(request: object, **kwargs: object) -> object:
        nonlocal pages
        pages += 1
        response = await original(request, **kwargs)
        if pages == 1:  # another writer between our first and second page
            await store.client.txn((), [put(keys[-1], b"v2"), put(prefix + b"9999", b"new")])
        return response

    store.client._kv.Range = range_then_write
    try:
        (kvs,), revision = await store.client.read_all((prefix, prefix_end(prefix)))
    finally:
        store.client._kv.Range = original
    assert pages == 3
    assert [kv.key for kv in kvs] == keys
    assert {kv.value for kv in kvs} == {b"v1"}
    (after,), later = await store.client.read_all((prefix, prefix_end(prefix)))
    assert later > revision and len(after) == len(keys) + 1
