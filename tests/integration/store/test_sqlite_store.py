"""SqliteStore on a real file: restart keeps everything, revisions never reused, failures write nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from controlplane.contracts import parse_contract_json
from controlplane.errors import NotFound, Unavailable, VersionMismatch
from controlplane.store import SqliteStore

C1 = parse_contract_json('{"temperature": 1}')
C2 = parse_contract_json('{"top_k": {"min": 1, "max": 8, "default": 4}}', "reject")


async def test_restart_restores_the_live_set_history_and_next_revision(tmp_path: Path):
    """Reopening the file gives the same snapshot and continues revisions after the last one."""
    path = tmp_path / "sub" / "control.db"
    store = SqliteStore(path)
    await store.open()
    await store.update("*", C1, expected_version=None, allow_missing=True, author="a", comment="x")
    await store.update("m", C2, expected_version=None, allow_missing=True, author="b", comment="y")
    await store.delete("*", expected_version=1, author="a", comment="")
    before = store.snapshot()
    await store.close()
    reopened = SqliteStore(path)
    await reopened.open()
    try:
        after = reopened.snapshot()
        assert after.revision == 3 and list(after.contracts) == ["m"]
        assert after.contracts["m"] == before.contracts["m"]
        assert after.contracts["m"].contract == C2
        written = await reopened.update(
            "*", C1, expected_version=2, allow_missing=True, author="a", comment=""
        )
        assert (written.version, written.revision) == (3, 4)
    finally:
        await reopened.close()


async def test_the_database_uses_wal_and_full_sync(tmp_path: Path):
    """The file is in WAL mode and the store's connection commits with synchronous=FULL (2)."""
    store = SqliteStore(tmp_path / "c.db")
    await store.open()
    try:
        mode = await store.database.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
        sync = await store.database.read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        assert (mode, sync) == ("wal", 2)
    finally:
        await store.close()


async def test_refused_writes_leave_no_row_and_burn_no_revision(tmp_path: Path):
    """ABORTED and NOT_FOUND writes change nothing, so the next write takes the next revision."""
    store = SqliteStore(tmp_path / "c.db")
    await store.open()
    try:
        await store.update("*", C1, expected_version=0, allow_missing=True, author="a", comment="")
        with pytest.raises(VersionMismatch):
            await store.update("*", C1, expected_version=0, allow_missing=True, author="a", comment="")
        with pytest.raises(NotFound):
            await store.update("m", C1, expected_version=None, allow_missing=False, author="a", comment="")
        with pytest.raises(NotFound):
            await store.delete("m", expected_version=None, author="a", comment="")
        rows = sqlite3.connect(tmp_path / "c.db").execute("SELECT COUNT(*) FROM contract_versions").fetchone()
        assert rows == (1,)
        written = await store.update(
            "m", C1, expected_version=None, allow_missing=True, author="a", comment=""
        )
        assert written.revision == 2
    finally:
        await store.close()


async def test_a_cancelled_writer_still_publishes_its_committed_change(tmp_path: Path):
    """Cancelling the caller mid-write cannot leave a committed version invisible to watchers."""
    store = SqliteStore(tmp_path / "c.db")
    await store.open()
    try:
        task = asyncio.create_task(
            store.update("*", C1, expected_version=None, allow_missing=True, author="a", comment="")
        )
        await asyncio.sleep(0)
        task.cancel()
        snapshot = await asyncio.wait_for(store.wait_for_change(0), 5)
        assert snapshot.revision == 1 and "*" in snapshot.contracts
    finally:
        await store.close()


async def test_a_second_store_on_the_same_file_is_refused_until_the_first_closes(tmp_path: Path):
    """One control plane per SQLite file: a second open fails with a message, works after close."""
    first = SqliteStore(tmp_path / "c.db")
    await first.open()
    second = SqliteStore(tmp_path / "c.db")
    with pytest.raises(Unavailable, match="in use by another control plane"):
        await second.open()
    await second.close()
    await first.close()
    third = SqliteStore(tmp_path / "c.db")
    await third.open()
    await third.close()
