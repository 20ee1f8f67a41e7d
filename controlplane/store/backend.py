"""Which backend ``--store`` names, and the tables that live next to the contracts in it.

``sqlite:PATH`` keeps contracts, the worker registry and router stats in one file (one control
plane per file); ``etcd://...`` keeps all three under the prefix on the cluster, shared by every
control plane given the same endpoints and prefix (SPEC §1, §6).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlplane.settings import StoreLocation
from controlplane.store.database import SqliteDatabase
from controlplane.store.etcd import EtcdStore
from controlplane.store.etcd_routers import EtcdRouterStatsStore
from controlplane.store.etcd_workers import EtcdWorkerRegistry
from controlplane.store.routers import RouterStatsStore, SqliteRouterStatsStore
from controlplane.store.sqlite import SqliteStore
from controlplane.store.workers import SqliteWorkerRegistry, WorkerRegistry

AnyStore = SqliteStore | EtcdStore


def make_store(location: StoreLocation) -> AnyStore:
    """The contract store for ``--store`` (not opened yet)."""
    return SqliteStore(location) if isinstance(location, Path) else EtcdStore(location)


def describe(location: StoreLocation) -> str:
    """The ``--store`` value as the operator wrote it (for startup errors and logs)."""
    return f"sqlite:{location}" if isinstance(location, Path) else str(location)


@dataclass(frozen=True, slots=True)
class Tables:
    """The other durable state, in the same backend as the contracts."""

    database: SqliteDatabase | None  # the SQLite file, None on etcd
    workers: WorkerRegistry
    router_stats: RouterStatsStore


async def open_tables(store: AnyStore) -> Tables:
    """The worker registry and router stats of an opened ``store``."""
    if isinstance(store, SqliteStore):
        return Tables(
            store.database,
            await SqliteWorkerRegistry.open(store.database),
            await SqliteRouterStatsStore.open(store.database),
        )
    return Tables(None, EtcdWorkerRegistry(store.client), EtcdRouterStatsStore(store.client))
