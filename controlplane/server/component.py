"""How a service plugs into the control plane (``controlplane.app`` composes these).

A component factory receives the ``AppContext`` (settings, stores, contract views) and
returns a ``Component``: the gRPC services it serves, the background tasks the app owns for it
(started after the server starts, cancelled on stop), the HTML sections it adds to the status
page, and hooks run at the start of shutdown (to end its streams). Adding a service is one line
in ``controlplane.app.COMPONENTS``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpc import aio

from controlplane.settings import ControlSettings
from controlplane.store import SqliteDatabase, Store
from controlplane.store.routers import RouterStatsStore
from controlplane.store.workers import WorkerRegistry

if TYPE_CHECKING:
    from controlplane.server.contract_views import ContractViews


@dataclass(frozen=True, slots=True)
class ServiceBinding:
    """A servicer, the generated ``add_XServicer_to_server`` and the full service name."""

    add_to_server: Callable[[Any, aio.Server], None]
    servicer: object
    name: str

    def register(self, server: aio.Server) -> None:
        self.add_to_server(self.servicer, server)


@dataclass(frozen=True, slots=True)
class StatusSection:
    """A section of the status page and of ``/status.json`` (the same content twice).

    ``data()`` reads the section's content now, as JSON-ready values (under ``key`` in
    ``/status.json``); ``render(data)`` makes the page's HTML fragment of that content, every value
    escaped. The page reads each section once per request and renders what it read.
    """

    key: str
    title: str
    data: Callable[[], dict[str, Any]]
    render: Callable[[Mapping[str, Any]], str]


@dataclass(slots=True)
class Component:
    services: list[ServiceBinding] = field(default_factory=list)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    status_sections: list[StatusSection] = field(default_factory=list)
    on_shutdown: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AppContext:
    """What components may use. ``database`` is the SQLite file of the store (None on etcd);
    ``workers`` and ``router_stats`` live in the same backend as the contracts."""

    settings: ControlSettings
    store: Store
    database: SqliteDatabase | None
    contracts: ContractViews
    workers: WorkerRegistry
    router_stats: RouterStatsStore


ComponentFactory = Callable[[AppContext], Awaitable[Component]]
