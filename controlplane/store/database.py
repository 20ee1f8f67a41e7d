"""One SQLite database file shared by the control plane's tables, run on one thread.

sqlite3 blocks, so every call runs on a dedicated single-thread executor: the event loop never
waits on the disk, and the one thread is the one writer (SPEC §6 Durability: WAL with
``synchronous=FULL``, so a COMMIT has reached the disk when it returns). Other modules that keep
tables in the same file (the worker registry) use ``SqliteDatabase.transaction``/``read`` on the
same instance, or ``connect`` for a connection with the same pragmas.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from controlplane.errors import Unavailable

T = TypeVar("T")

# WAL + FULL: a committed transaction survives a crash or power loss; busy_timeout waits for a
# second connection's write lock instead of failing at once.
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
)


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating the file and its directory) with the control plane's pragmas.

    ``isolation_level=None``: no implicit transactions; ``transaction`` issues BEGIN IMMEDIATE.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    return conn


def _lock(path: Path) -> int:
    """Hold ``PATH.lock`` exclusively for the life of the process (the kernel drops it on exit,
    kill -9 included): two control planes on one file would each serve a stale in-memory view."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Unavailable(f"{path} is in use by another control plane") from None
    return fd


class SqliteDatabase:
    """A connection owned by one thread; ``read``/``transaction`` run functions on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None

    async def open(self) -> None:
        """Lock the file for this process and connect; ``Unavailable`` says why it cannot."""
        try:
            self._lock_fd = await self._submit(lambda: _lock(self.path))
            self._conn = await self._submit(lambda: connect(self.path))
        except (OSError, sqlite3.Error) as exc:
            raise Unavailable(f"cannot open the SQLite store {self.path}: {exc}") from exc

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._submit(conn.close)
        self._executor.shutdown(wait=True)
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # releases the flock

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the database thread (no transaction beyond the statement's own)."""
        conn = self._connection()
        return await self._submit(lambda: fn(conn))

    async def transaction(
        self,
        fn: Callable[[sqlite3.Connection], T],
        after_commit: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``fn(conn)`` inside BEGIN IMMEDIATE ... COMMIT; any exception rolls back.

        Returns only after COMMIT, i.e. after the write is durable. ``after_commit(result)`` runs
        on the database thread right after COMMIT, before the next queued call (for state that
        must follow commit order). Cancelling the caller does not cancel the write (a thread
        cannot be interrupted): callers that keep in-memory state in step with the database
        shield the whole step (see ``SqliteStore``).
        """
        conn = self._connection()

        def run() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if after_commit is not None:
                after_commit(result)
            return result

        return await self._submit(run)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise Unavailable("the store is closed")
        return self._conn

    async def _submit(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)
